package component

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
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

// Admin is the part serving AdminHandler(reg, checks...) on ln; with ln
// nil (no admin address, see Listen) it only waits for the end.
func Admin(ln net.Listener, reg *prometheus.Registry, checks ...func() error) Part {
	if ln == nil {
		return Part{Name: "admin server", Run: func(ctx context.Context) error { <-ctx.Done(); return nil }}
	}
	return HTTP("admin server", ln, &http.Server{Handler: AdminHandler(reg, checks...), ReadHeaderTimeout: 10 * time.Second})
}
