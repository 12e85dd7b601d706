package tcptest

import (
	"net"
	"net/netip"
	"testing"
)

// Serve listens on addr (loopback; "127.0.0.1:0" for any port) and runs
// handle on each connection accepted, in its own goroutine, which closes
// it afterwards; until stop is called or the test ends.
func Serve(t testing.TB, addr string, handle func(net.Conn)) (at netip.AddrPort, stop func()) {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	stop = func() { ln.Close() }
	t.Cleanup(stop)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				handle(c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).AddrPort(), stop
}
