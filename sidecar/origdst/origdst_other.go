//go:build !linux

package origdst

import (
	"net"
	"net/netip"
)

func get(*net.TCPConn, bool) (netip.AddrPort, error) { return netip.AddrPort{}, ErrUnsupported }
