package connlimit

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/testsupport/tcptest"
)

// TestListenerBounds: at most max connections in all and perSource from
// one address; one more is closed at once and counted; a closed
// connection gives its place back; loopback clients are never refused.
func TestListenerBounds(t *testing.T) {
	fake := tcptest.NewListener()
	var refused atomic.Int32
	ln := Listener(fake, New(3, 2), func() { refused.Add(1) })
	accepted := make(chan net.Conn, 100)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() { fake.Close() })
	src := func(ip string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(ip), 40000) }

	admit := func(ip string) net.Conn {
		t.Helper()
		fake.Dial(src(ip))
		select {
		case c := <-accepted:
			return c
		case <-time.After(5 * time.Second):
			t.Fatalf("a connection from %s was not admitted", ip)
			return nil
		}
	}
	refuse := func(ip string, want int32) {
		t.Helper()
		client := fake.Dial(src(ip))
		client.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := client.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrClosedPipe) {
			t.Errorf("a connection from %s over the bounds: read %v, want closed at once", ip, err)
		}
		if refused.Load() != want {
			t.Errorf("refused %d, want %d", refused.Load(), want)
		}
	}
	a1 := admit("10.0.0.1")
	admit("10.0.0.1")
	refuse("10.0.0.1", 1) // perSource
	admit("10.0.0.2")
	refuse("10.0.0.3", 2) // max
	admit("127.0.0.1")    // loopback: not counted
	admit("::1")
	a1.Close()
	a1.Close() // twice: gives one place back
	admit("10.0.0.3")
	refuse("10.0.0.4", 3)
}
