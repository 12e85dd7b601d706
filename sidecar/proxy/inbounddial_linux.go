package proxy

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// bindAddressNoPort sets IP_BIND_ADDRESS_NO_PORT (no privilege needed, for
// IPv6 sockets too): the bind to the inbound source then takes no port of
// its own, and connect picks one per destination, so the source's ports
// are shared by all destinations as an unbound dial's are.
func bindAddressNoPort(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_BIND_ADDRESS_NO_PORT, 1)
	}); err != nil {
		return err
	}
	return serr
}
