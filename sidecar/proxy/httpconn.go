package proxy

import (
	"net"
	"net/netip"
	"sync/atomic"

	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// httpConn carries the original destination and the mesh TLS of the
// connection into the HTTP server, and gives back the connection's slot
// when the server closes it.
type httpConn struct {
	net.Conn
	dst     netip.AddrPort
	tls     metrics.TLS
	release func()
}

func (c *httpConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// connSlots bounds the open connections of one direction
// (PLEXUS_PROXY_MAX_CONNECTIONS).
type connSlots struct {
	n   atomic.Int64
	max int64
}

func (s *connSlots) take() bool {
	if s.n.Add(1) > s.max {
		s.n.Add(-1)
		return false
	}
	return true
}

func (s *connSlots) give() { s.n.Add(-1) }
