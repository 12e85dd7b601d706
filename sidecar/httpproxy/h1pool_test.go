package httpproxy

import (
	"net"
	"net/netip"
	"testing"
)

// Idle connections to an endpoint discovery removed are closed; those to
// others stay pooled.
func TestPoolCloseIdleTo(t *testing.T) {
	p := &h1pool{max: 4}
	gone, kept := netip.MustParseAddrPort("10.1.0.1:80"), netip.MustParseAddrPort("10.1.0.2:80")
	conns := map[netip.AddrPort]net.Conn{}
	for _, a := range []netip.AddrPort{gone, kept} {
		c, peer := net.Pipe()
		t.Cleanup(func() { c.Close(); peer.Close() })
		conns[a] = peer
		p.put(poolKey{addr: a}, newUpstream(dialed{conn: c}, 0))
	}
	p.closeIdleTo([]netip.AddrPort{gone})
	if _, err := conns[gone].Read(make([]byte, 1)); err == nil {
		t.Error("the connection to the removed endpoint is still open")
	}
	if u := p.get(poolKey{addr: gone}); u != nil {
		t.Error("the pool still offers a connection to the removed endpoint")
	}
	if u := p.get(poolKey{addr: kept}); u == nil {
		t.Error("the connection to the other endpoint was closed too")
	}
}
