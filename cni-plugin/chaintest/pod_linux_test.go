package chaintest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"golang.org/x/sys/unix"
)

// pod is a network namespace attached through the chain.
type pod struct {
	name string
	ns   ns.NetNS
	rt   *libcni.RuntimeConf
	v4   netip.Addr
	v6   netip.Addr
	res  types.Result // the chain's result
}

// addPod creates the netns, runs loopback and then the given list.
func (e *env) addPod(name string, list *libcni.NetworkConfigList) (*pod, error) {
	p := &pod{name: name, ns: newNS(e.t)}
	p.rt = e.rt(p.ns, name)
	ctx := context.Background()
	var res types.Result
	err := e.inNode(func() error {
		loRT := *p.rt
		loRT.IfName = "lo"
		if _, err := e.cni.AddNetwork(ctx, e.lo, &loRT); err != nil {
			return fmt.Errorf("loopback ADD: %w", err)
		}
		var err error
		res, err = e.cni.AddNetworkList(ctx, list, p.rt)
		return err
	})
	e.t.Cleanup(func() { _ = e.inNode(func() error { return e.cni.DelNetworkList(context.Background(), list, p.rt) }) })
	if err != nil {
		return p, err
	}
	p.res = res
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return p, err
	}
	for _, ip := range r.IPs {
		a, _ := netip.AddrFromSlice(ip.Address.IP)
		if a.Unmap().Is4() {
			p.v4 = a.Unmap()
		} else {
			p.v6 = a
		}
	}
	if !p.v4.IsValid() {
		return p, fmt.Errorf("pod %s got no IPv4 address: %v", name, res)
	}
	return p, nil
}

func (e *env) mustAddPod(name string, list *libcni.NetworkConfigList) *pod {
	e.t.Helper()
	p, err := e.addPod(name, list)
	if err != nil {
		e.t.Fatalf("ADD %s: %v", name, err)
	}
	return p
}

func (e *env) check(p *pod) error {
	return e.inNode(func() error { return e.cni.CheckNetworkList(context.Background(), e.chain, p.rt) })
}

func (e *env) del(p *pod) error {
	return e.inNode(func() error { return e.cni.DelNetworkList(context.Background(), e.chain, p.rt) })
}

// natSave returns iptables-save (or ip6tables-save) -t nat in p's netns.
func natSave(t testing.TB, n ns.NetNS, v6 bool) string {
	t.Helper()
	bin := "iptables-save"
	if v6 {
		bin = "ip6tables-save"
	}
	var out []byte
	err := n.Do(func(ns.NetNS) error {
		var err error
		out, err = exec.Command(bin, "-t", "nat").CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v: %s", bin, err, out)
	}
	return string(out)
}

func runIn(t testing.TB, n ns.NetNS, args ...string) {
	t.Helper()
	err := n.Do(func(ns.NetNS) error {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// arrival is one accepted connection: where it was accepted, the token the
// client sent, and the original destination the kernel recorded.
type arrival struct {
	listener string
	token    string
	origDst  netip.AddrPort
	origErr  error
}

// recorder runs listeners in several namespaces and collects arrivals.
type recorder struct {
	mu       sync.Mutex
	arrivals []arrival
	added    chan struct{} // closed at the next arrival; nil until someone waits
	lns      []net.Listener
	wg       sync.WaitGroup
}

// listen opens a TCP listener (network "tcp4" or "tcp6") on addr inside n;
// label names it in arrivals.
func (r *recorder) listen(t testing.TB, n ns.NetNS, network, addr, label string) {
	t.Helper()
	var ln net.Listener
	if err := n.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen(network, addr)
		return err
	}); err != nil {
		t.Fatalf("listen %s (%s): %v", addr, label, err)
	}
	r.lns = append(r.lns, ln)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			a := arrival{listener: label}
			a.origDst, a.origErr = originalDst(c.(*net.TCPConn))
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			buf := make([]byte, 64)
			nr, _ := c.Read(buf)
			a.token = string(buf[:nr])
			_, _ = c.Write([]byte("ok"))
			_ = c.Close()
			r.mu.Lock()
			r.arrivals = append(r.arrivals, a)
			if r.added != nil {
				close(r.added)
				r.added = nil
			}
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() { _ = ln.Close() })
}

// find waits up to 3 s for the arrival carrying token.
func (r *recorder) find(token string) (arrival, bool) {
	deadline := time.NewTimer(3 * time.Second)
	defer deadline.Stop()
	for {
		r.mu.Lock()
		for _, a := range r.arrivals {
			if a.token == token {
				r.mu.Unlock()
				return a, true
			}
		}
		if r.added == nil {
			r.added = make(chan struct{})
		}
		added := r.added
		r.mu.Unlock()
		select {
		case <-added:
		case <-deadline.C:
			return arrival{}, false
		}
	}
}

// originalDst reads SO_ORIGINAL_DST (IPv4) or IP6T_SO_ORIGINAL_DST (IPv6).
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local := c.LocalAddr().(*net.TCPAddr)
	var ap netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		if local.IP.To4() != nil {
			var m *unix.IPv6Mreq // 20 bytes, enough for a sockaddr_in (16)
			m, serr = unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
			if serr == nil {
				b := m.Multiaddr
				port := binary.BigEndian.Uint16(b[2:4])
				ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}), port)
			}
			return
		}
		var sa *unix.IPv6MTUInfo // holds a sockaddr_in6 (28 bytes)
		sa, serr = unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, unix.SO_ORIGINAL_DST)
		if serr == nil {
			port := (*[2]byte)(unsafe.Pointer(&sa.Addr.Port)) // network byte order
			ap = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr.Addr), binary.BigEndian.Uint16(port[:]))
		}
	})
	if err != nil {
		return netip.AddrPort{}, err
	}
	return ap, serr
}

// dial connects from inside n to dst and sends token; it returns once the
// peer answered.
func dial(n ns.NetNS, dst netip.AddrPort, token string) error {
	var c net.Conn
	if err := n.Do(func(ns.NetNS) error {
		var err error
		c, err = net.DialTimeout("tcp", dst.String(), 3*time.Second)
		return err
	}); err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	if _, err := c.Write([]byte(token)); err != nil {
		return err
	}
	buf := make([]byte, 2)
	if _, err := c.Read(buf); err != nil {
		return fmt.Errorf("reading the answer: %w", err)
	}
	return nil
}

// dialAs connects from inside n as uid/gid through a child process (bash's
// /dev/tcp), forked from a thread that is in n.
func dialAs(n ns.NetNS, uid, gid uint32, dst netip.AddrPort, token string) error {
	host := dst.Addr().String()
	script := fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && printf %%s %s >&3 && head -c 2 <&3", host, dst.Port(), token)
	return n.Do(func(ns.NetNS) error {
		cmd := exec.Command("/bin/bash", "-c", script)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: gid}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("bash as %d: %w: %s", uid, err, out)
		}
		if string(out) != "ok" {
			return errors.New("unexpected answer " + string(out))
		}
		return nil
	})
}

// envDialHelper makes the test binary dial once and exit (TestMain):
// "uid gid source destination token", source "-" for none.
const envDialHelper = "PLEXUS_CHAINTEST_DIAL"

// dialFrom connects from inside n as uid/gid from source src (none when
// invalid), as the proxy's inbound side dials the application. bash
// cannot bind a source, so a child of the test binary does it: started as
// root from a thread in n, it drops to uid/gid itself (dialHelper), which
// also spares uid access to the test binary's directory.
func dialFrom(n ns.NetNS, uid, gid uint32, src netip.Addr, dst netip.AddrPort, token string) error {
	source := "-"
	if src.IsValid() {
		source = src.String()
	}
	return n.Do(func(ns.NetNS) error {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d %s %s %s", envDialHelper, uid, gid, source, dst, token))
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("dial helper as %d from %s: %w: %s", uid, source, err, out)
		}
		if string(out) != "ok" {
			return errors.New("unexpected answer " + string(out))
		}
		return nil
	})
}

// dialHelper is the child of dialFrom: it takes the IDs, dials, sends the
// token, prints the 2-byte answer and returns the exit code.
func dialHelper(arg string) int {
	f := strings.Fields(arg)
	if len(f) != 5 {
		fmt.Fprintf(os.Stderr, "%s=%q: want uid gid source destination token\n", envDialHelper, arg)
		return 2
	}
	uid, err1 := strconv.Atoi(f[0])
	gid, err2 := strconv.Atoi(f[1])
	if err := errors.Join(err1, err2, syscall.Setgroups(nil), syscall.Setgid(gid), syscall.Setuid(uid)); err != nil {
		fmt.Fprintln(os.Stderr, "dropping to", f[0], f[1], err)
		return 3
	}
	d := net.Dialer{Timeout: 3 * time.Second}
	if f[2] != "-" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(f[2])}
	}
	c, err := d.Dial("tcp", f[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 2)
	if _, err := c.Write([]byte(f[4])); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if _, err := io.ReadFull(c, buf); err != nil {
		fmt.Fprintln(os.Stderr, "reading the answer:", err)
		return 1
	}
	fmt.Print(string(buf))
	return 0
}

func unmount(n ns.NetNS) error {
	return testutils.UnmountNS(n)
}
