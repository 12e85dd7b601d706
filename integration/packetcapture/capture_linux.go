// Package packetcapture records the TCP payloads an interface carries in a
// network namespace (an AF_PACKET socket opened inside it), so a test can
// prove what crossed the wire: TLS records only, or plaintext.
package packetcapture

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Segment is one TCP segment with a payload.
type Segment struct {
	Src, Dst netip.AddrPort
	Payload  []byte
}

// Capture reads segments until Stop.
type Capture struct {
	fd      int
	mu      sync.Mutex
	segs    []Segment
	done    chan struct{}
	stopped bool
}

// Start opens a capture on interface ifname in the network namespace at
// netnsPath, keeping IPv4 TCP segments with a payload to or from port.
func Start(netnsPath, ifname string, port uint16) (*Capture, error) {
	fd, err := socketIn(netnsPath, ifname)
	if err != nil {
		return nil, err
	}
	c := &Capture{fd: fd, done: make(chan struct{})}
	go c.read(port)
	return c, nil
}

// socketIn opens and binds the packet socket from a thread that has
// entered the namespace; the socket stays in it after the thread leaves.
func socketIn(netnsPath, ifname string) (int, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	self, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening this thread's netns: %w", err)
	}
	defer unix.Close(self)
	target, err := unix.Open(netnsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("opening netns %s: %w", netnsPath, err)
	}
	defer unix.Close(target)
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		return -1, fmt.Errorf("entering netns %s: %w", netnsPath, err)
	}
	defer func() {
		if err := unix.Setns(self, unix.CLONE_NEWNET); err != nil {
			panic(fmt.Sprintf("packetcapture: cannot return to the original netns: %v", err))
		}
	}()
	iface, err := net.InterfaceByName(ifname)
	if err != nil {
		return -1, fmt.Errorf("interface %s in %s: %w", ifname, netnsPath, err)
	}
	proto := htons(unix.ETH_P_IP)
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(proto))
	if err != nil {
		return -1, fmt.Errorf("packet socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: proto, Ifindex: iface.Index}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("binding the packet socket to %s: %w", ifname, err)
	}
	tv := unix.NsecToTimeval(int64(200 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func (c *Capture) read(port uint16) {
	defer close(c.done)
	buf := make([]byte, 65536)
	for {
		c.mu.Lock()
		stopped := c.stopped
		c.mu.Unlock()
		if stopped {
			return
		}
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if seg, ok := parse(buf[:n]); ok && (seg.Src.Port() == port || seg.Dst.Port() == port) {
			c.mu.Lock()
			c.segs = append(c.segs, seg)
			c.mu.Unlock()
		}
	}
}

// parse reads an Ethernet frame carrying IPv4/TCP with a payload.
func parse(frame []byte) (Segment, bool) {
	if len(frame) < 14 || binary.BigEndian.Uint16(frame[12:14]) != unix.ETH_P_IP {
		return Segment{}, false
	}
	ip := frame[14:]
	if len(ip) < 20 || ip[0]>>4 != 4 || ip[9] != unix.IPPROTO_TCP {
		return Segment{}, false
	}
	ihl := int(ip[0]&0x0f) * 4
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if ihl < 20 || total > len(ip) || total < ihl+20 {
		return Segment{}, false
	}
	tcp := ip[ihl:total]
	off := int(tcp[12]>>4) * 4
	if off < 20 || off > len(tcp) || off == len(tcp) {
		return Segment{}, false
	}
	src, _ := netip.AddrFromSlice(ip[12:16])
	dst, _ := netip.AddrFromSlice(ip[16:20])
	return Segment{
		Src:     netip.AddrPortFrom(src, binary.BigEndian.Uint16(tcp[0:2])),
		Dst:     netip.AddrPortFrom(dst, binary.BigEndian.Uint16(tcp[2:4])),
		Payload: append([]byte(nil), tcp[off:]...),
	}, true
}

// Stop ends the capture and returns what it saw.
func (c *Capture) Stop() []Segment {
	c.mu.Lock()
	c.stopped = true
	c.mu.Unlock()
	<-c.done
	unix.Close(c.fd)
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.segs
}

// Stream concatenates the payloads sent to dst, in capture order; with
// one connection at a time that is the byte stream a listener received.
func Stream(segs []Segment, dst netip.AddrPort) []byte {
	var out []byte
	for _, s := range segs {
		if s.Dst == dst {
			out = append(out, s.Payload...)
		}
	}
	return out
}

// OnlyTLS checks that every connection's byte stream in segs is a sequence
// of well-formed TLS records (TLS 1.2 record versions, as TLS 1.3 uses);
// it names the first flow that is not. Segments are grouped by flow
// (src→dst) in capture order; retransmissions are not expected on a
// bridge and would show up as an error.
func OnlyTLS(segs []Segment) error {
	flows := map[[2]netip.AddrPort][]byte{}
	var order [][2]netip.AddrPort
	for _, s := range segs {
		k := [2]netip.AddrPort{s.Src, s.Dst}
		if _, ok := flows[k]; !ok {
			order = append(order, k)
		}
		flows[k] = append(flows[k], s.Payload...)
	}
	if len(order) == 0 {
		return errors.New("no TCP payload captured")
	}
	for _, k := range order {
		if err := tlsRecords(flows[k]); err != nil {
			return fmt.Errorf("flow %s -> %s: %w (first bytes %q)", k[0], k[1], err, head(flows[k]))
		}
	}
	return nil
}

func tlsRecords(b []byte) error {
	for len(b) > 0 {
		if len(b) < 5 {
			return nil // a record cut by the end of the capture
		}
		typ, major, n := b[0], b[1], int(binary.BigEndian.Uint16(b[3:5]))
		if typ < 20 || typ > 23 || major != 3 || n > 1<<14+2048 {
			return fmt.Errorf("not a TLS record (type %d, version %d.%d)", typ, major, b[2])
		}
		if len(b) < 5+n {
			return nil
		}
		b = b[5+n:]
	}
	return nil
}

func head(b []byte) []byte {
	if len(b) > 32 {
		return b[:32]
	}
	return b
}
