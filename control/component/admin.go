package component

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/plexus-mesh/plexus/mesh/connlimit"
)

// AdminHandler is the admin endpoint every control-plane service serves:
// /metrics from reg, /live, and /ready, which answers 503 with the first
// reason one of checks gives until they all pass (nil checks are
// skipped).
func AdminHandler(reg *prometheus.Registry, checks ...func() error) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "live") })
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		for _, check := range checks {
			if check == nil {
				continue
			}
			if err := check(); err != nil {
				http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
				return
			}
		}
		fmt.Fprintln(w, "ready")
	})
	return mux
}

// An admin port's bounds: any pod can reach it (the kubelet's probes and
// Prometheus must), so it holds at most AdminMaxConnections connections
// and AdminMaxPerSource from one address (loopback not counted); one more
// is reset at once and counted in plexus_admin_connections_refused_total.
// A request must arrive whole within 10 s, a connection idle 30 s is
// closed. The total is high enough that starving the kubelet's probes
// (which would take the component out of its Service) needs 64 source
// addresses, and low enough to bound memory (~7 KiB per idle
// connection: ~7 MiB).
const (
	AdminMaxConnections = 1024
	AdminMaxPerSource   = 16
	adminReadTimeout    = 10 * time.Second
	adminWriteTimeout   = 30 * time.Second
	adminIdleTimeout    = 30 * time.Second
	adminMaxHeaderBytes = 16 << 10
)

// Admin is the part serving AdminHandler(reg, checks...) on ln, bounded as
// above; with ln nil (no admin address, see Listen) it only waits for the
// end.
func Admin(ln net.Listener, reg *prometheus.Registry, checks ...func() error) Part {
	if ln == nil {
		return Part{Name: "admin server", Run: func(ctx context.Context) error { <-ctx.Done(); return nil }}
	}
	refused := prometheus.NewCounter(prometheus.CounterOpts{Name: "plexus_admin_connections_refused_total",
		Help: "Connections to the admin port reset at once: it held its most, in all or from that address."})
	if err := reg.Register(refused); err != nil {
		var already prometheus.AlreadyRegisteredError
		if errors.As(err, &already) {
			refused = already.ExistingCollector.(prometheus.Counter)
		}
	}
	capped := connlimit.Listener(ln, connlimit.New(AdminMaxConnections, AdminMaxPerSource), refused.Inc)
	return HTTP("admin server", capped, &http.Server{
		Handler:           AdminHandler(reg, checks...),
		ReadHeaderTimeout: adminReadTimeout,
		ReadTimeout:       adminReadTimeout,
		WriteTimeout:      adminWriteTimeout,
		IdleTimeout:       adminIdleTimeout,
		MaxHeaderBytes:    adminMaxHeaderBytes,
	})
}
