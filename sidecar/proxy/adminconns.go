package proxy

import (
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/plexus-mesh/plexus/mesh/connlimit"
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

// capListener bounds ln's connections; one more is reset and counted as
// limit_exceeded_total{direction=dir}.
func capListener(ln net.Listener, max int, dir string, m *metrics.Metrics) net.Listener {
	return connlimit.Listener(ln, connlimit.New(max, adminMaxPerSource), func() { m.LimitExceeded(dir, metrics.LimitConnections) })
}
