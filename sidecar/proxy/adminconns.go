package proxy

import (
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// The admin port and the redirect probe port carry no mesh traffic, but
// any pod can reach them: their connections are bounded like the data
// path's. Each port holds at most Config.AdminMaxConnections connections,
// and at most adminMaxPerSource from one address, so that one pod cannot
// take them all and starve the kubelet's probes (one more is reset at once
// and counted in limit_exceeded_total with direction "admin" or "probe");
// clients on the pod's loopback (the pod itself, an operator's
// port-forward) are not counted. A request must arrive whole within
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
	// adminMaxPerSource bounds one address's connections to the admin or
	// probe port: a kubelet's probes, a Prometheus, a few operators.
	adminMaxPerSource = 16
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

// connLimiter bounds a port's connections: max in all and perSource from
// one address; loopback clients are not counted.
type connLimiter struct {
	max, perSource int
	mu             sync.Mutex
	n              int
	bySource       map[netip.Addr]int
}

func newConnLimiter(max, perSource int) *connLimiter {
	return &connLimiter{max: max, perSource: perSource, bySource: map[netip.Addr]int{}}
}

// take admits a connection from src, returning the function that gives
// its place back (call it once), or ok=false.
func (l *connLimiter) take(src netip.Addr) (release func(), ok bool) {
	src = src.Unmap()
	if src.IsLoopback() {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n >= l.max || l.bySource[src] >= l.perSource {
		return nil, false
	}
	l.n++
	l.bySource[src]++
	return sync.OnceFunc(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.n--
		if l.bySource[src]--; l.bySource[src] <= 0 {
			delete(l.bySource, src)
		}
	}), true
}

// remoteAddr is c's peer address (the zero Addr when it has none).
func remoteAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr()
	}
	return netip.Addr{}
}

// cappedListener accepts the connections its limiter admits; one more is
// reset and counted as limit_exceeded_total{direction=dir}.
type cappedListener struct {
	net.Listener
	limit *connLimiter
	dir   string
	m     *metrics.Metrics
}

func capListener(ln net.Listener, max int, dir string, m *metrics.Metrics) net.Listener {
	return &cappedListener{Listener: ln, limit: newConnLimiter(max, adminMaxPerSource), dir: dir, m: m}
}

func (l *cappedListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		release, ok := l.limit.take(remoteAddr(c))
		if !ok {
			l.m.LimitExceeded(l.dir, metrics.LimitConnections)
			resetClose(c)
			continue
		}
		return &slotConn{Conn: c, release: release}, nil
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
