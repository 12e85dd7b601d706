// Package origdst recovers the destination a client originally dialled
// before an iptables REDIRECT rule sent its connection to the proxy.
package origdst

import (
	"errors"
	"net"
	"net/netip"
)

// ErrUnsupported is returned on platforms without SO_ORIGINAL_DST.
var ErrUnsupported = errors.New("origdst: SO_ORIGINAL_DST is only available on Linux")

// Get returns the original destination of a redirected TCP connection
// accepted by the proxy: SO_ORIGINAL_DST for IPv4 (including IPv4 clients
// of a dual-stack listener) and IP6T_SO_ORIGINAL_DST for IPv6. A
// connection that was not redirected has no NAT entry and yields an error
// (usually ENOENT) or, depending on the kernel, its own local address.
func Get(c *net.TCPConn) (netip.AddrPort, error) {
	local, _ := c.LocalAddr().(*net.TCPAddr)
	if local == nil {
		return netip.AddrPort{}, errors.New("origdst: connection has no local TCP address")
	}
	ip, _ := netip.AddrFromSlice(local.IP)
	return get(c, ip.Unmap().Is4())
}
