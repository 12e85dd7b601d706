// Package adminhttp is the admin endpoint every control-plane service
// serves: /metrics from its registry, /live, and /ready, which answers 503
// with the first reason a check gives until they all pass.
package adminhttp

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Handler serves the admin endpoints; nil checks are skipped.
func Handler(reg *prometheus.Registry, checks ...func() error) http.Handler {
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
