package origdst

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ip6tSOOriginalDST is IP6T_SO_ORIGINAL_DST from linux/netfilter_ipv6/ip6_tables.h.
const ip6tSOOriginalDST = 80

func get(c *net.TCPConn, v4 bool) (netip.AddrPort, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("origdst: raw conn: %w", err)
	}
	var ap netip.AddrPort
	var serr error
	err = rc.Control(func(fd uintptr) {
		if v4 {
			// The kernel writes a struct sockaddr_in (16 bytes); IPv6Mreq is
			// a 20-byte buffer x/sys lets us pass to getsockopt.
			m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
			if err != nil {
				serr = fmt.Errorf("origdst: getsockopt(SOL_IP, SO_ORIGINAL_DST): %w", err)
				return
			}
			b := m.Multiaddr[:]
			if fam := binary.NativeEndian.Uint16(b[0:2]); fam != unix.AF_INET {
				serr = fmt.Errorf("origdst: SO_ORIGINAL_DST returned address family %d", fam)
				return
			}
			ap = netip.AddrPortFrom(netip.AddrFrom4([4]byte(b[4:8])), binary.BigEndian.Uint16(b[2:4]))
			return
		}
		// The kernel writes a struct sockaddr_in6 (28 bytes) into the
		// 32-byte struct ip6_mtuinfo buffer.
		m, err := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, ip6tSOOriginalDST)
		if err != nil {
			serr = fmt.Errorf("origdst: getsockopt(SOL_IPV6, IP6T_SO_ORIGINAL_DST): %w", err)
			return
		}
		sa := m.Addr
		if sa.Family != unix.AF_INET6 {
			serr = fmt.Errorf("origdst: IP6T_SO_ORIGINAL_DST returned address family %d", sa.Family)
			return
		}
		port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
		ap = netip.AddrPortFrom(netip.AddrFrom16(sa.Addr), port)
	})
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("origdst: control: %w", err)
	}
	return ap, serr
}
