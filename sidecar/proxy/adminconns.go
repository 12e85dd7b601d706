package proxy

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// The admin port and the redirect probe port carry no mesh traffic, but
// any pod can reach them: their connections are bounded like the data
// path's. Each port holds at most Config.AdminMaxConnections connections
// (one more is reset at once and counted in limit_exceeded_total with
// direction "admin" or "probe"), a request must arrive whole within
// adminReadTimeout, a connection idle for Config.AdminIdleTimeout between
// requests is closed, and a refused request closes its connection.

// Directions of limit_exceeded_total for the proxy's own ports.
const (
	limitAdmin = "admin"
	limitProbe = "probe"
)

const (
	adminReadHeaderTimeout = 5 * time.Second
	// adminReadTimeout bounds a whole request (the admin paths take no body).
	adminReadTimeout = 10 * time.Second
	// adminWriteTimeout bounds a response: /metrics of a busy proxy is
	// the largest.
	adminWriteTimeout   = 30 * time.Second
	adminMaxHeaderBytes = 16 << 10
)

// adminServer is the HTTP server of the admin or probe port.
func adminServer(h http.Handler, idle time.Duration, log *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: adminReadHeaderTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       idle,
		MaxHeaderBytes:    adminMaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
}

// cappedListener accepts at most slots' connections at once; one more is
// reset and counted as limit_exceeded_total{direction=dir}.
type cappedListener struct {
	net.Listener
	slots *connSlots
	dir   string
	m     *metrics.Metrics
}

func capListener(ln net.Listener, max int, dir string, m *metrics.Metrics) net.Listener {
	return &cappedListener{Listener: ln, slots: &connSlots{max: int64(max)}, dir: dir, m: m}
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if !l.slots.take() {
			l.m.LimitExceeded(l.dir, metrics.LimitConnections)
			resetClose(c)
			continue
		}
		return &slotConn{Conn: c, release: sync.OnceFunc(l.slots.give)}, nil
	}
}

// slotConn gives its slot back when closed.
type slotConn struct {
	net.Conn
	release func()
}

func (c *slotConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// resetClose closes c with a reset, so its client does not wait.
func resetClose(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
}
