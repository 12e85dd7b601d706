package metrics

import (
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/sidecar/sockio"
)

// Conn is a net.Conn that counts its bytes into tcp_read_bytes_total and
// tcp_write_bytes_total and its close into tcp_close_total.
type Conn struct {
	net.Conn
	read, write prometheus.Counter
	closeOK     prometheus.Counter
	closeFail   prometheus.Counter
	open        prometheus.Gauge
	once        sync.Once
	failed      atomic.Bool
}

// TrackConn counts c as opened now, for direction, bounded target, peer
// and mesh TLS.
func (m *Metrics) TrackConn(c net.Conn, direction, target, peer string, t TLS) *Conn {
	tls, client, server := t.values(direction)
	l := []string{direction, target, peer, tls, client, server}
	m.tcpOpen.WithLabelValues(l...).Inc()
	open := m.tcpConns.WithLabelValues(l...)
	open.Inc()
	return &Conn{
		Conn:      c,
		read:      m.tcpRead.WithLabelValues(l...),
		write:     m.tcpWrite.WithLabelValues(l...),
		closeOK:   m.tcpClose.WithLabelValues(append(l, "success")...),
		closeFail: m.tcpClose.WithLabelValues(append(l, "failure")...),
		open:      open,
	}
}

// Read counts bytes read; a connection the peer broke (reset) ends in
// failure.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	return n, c.account(c.read, n, err)
}

// Write counts bytes written; a connection the peer broke ends in failure.
func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	return n, c.account(c.write, n, err)
}

// account adds n to bytes and fails the connection if err says the peer
// broke it; it returns err.
func (c *Conn) account(bytes prometheus.Counter, n int, err error) error {
	if n > 0 {
		bytes.Add(float64(n))
	}
	if err != nil && broken(err) {
		c.Fail()
	}
	return err
}

// broken reports errors that mean the connection failed, as opposed to
// ending (EOF) or being closed or timed out by the proxy itself.
func broken(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.ETIMEDOUT) || errors.Is(err, syscall.EHOSTUNREACH)
}

// Fail marks the connection as ending in failure; it counts if called before the first Close.
func (c *Conn) Fail() { c.failed.Store(true) }

// Close closes the connection and counts the close once.
func (c *Conn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() {
		if c.failed.Load() {
			c.closeFail.Inc()
		} else {
			c.closeOK.Inc()
		}
		c.open.Dec()
	})
	return err
}

// CloseWrite half-closes the underlying connection.
func (c *Conn) CloseWrite() error { return sockio.CloseWrite(c.Conn) }
