// Package admin serves the proxy's admin endpoints: /live, /ready,
// /metrics, /shutdown and /endpoints.
package admin

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Options configure the admin handler.
type Options struct {
	Gatherer prometheus.Gatherer
	// Ready returns nil when the proxy should receive traffic, else the reason it should not.
	Ready func() error
	// Shutdown starts a graceful shutdown; it must not block.
	Shutdown func()
	// Endpoints, when set, returns the balancer's state (a JSON-encodable
	// value) for /endpoints.
	Endpoints func() any
}

// Handler returns the admin mux:
//
//	GET  /live      200 while the process serves HTTP at all
//	GET  /ready     200 when Ready returns nil, else 503 with the reason
//	GET  /metrics   Prometheus text exposition
//	POST /shutdown  starts a graceful shutdown; only from a loopback address
//	GET  /endpoints the balancer's endpoints as JSON; only from a loopback address
func Handler(opts Options) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /live", func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "live\n")
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) {
		if err := opts.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		io.WriteString(w, "ready\n")
	})
	mux.Handle("GET /metrics", promhttp.HandlerFor(opts.Gatherer, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /shutdown", func(w http.ResponseWriter, r *http.Request) {
		if !fromLoopback(r) {
			w.Header().Set("Connection", "close")
			http.Error(w, "shutdown is only accepted from localhost", http.StatusForbidden)
			return
		}
		opts.Shutdown()
		io.WriteString(w, "shutting down\n")
	})
	mux.HandleFunc("GET /endpoints", func(w http.ResponseWriter, r *http.Request) {
		if !fromLoopback(r) {
			// Who a pod talks to, and how each peer fares, is not for
			// anyone who can reach the admin port.
			w.Header().Set("Connection", "close")
			http.Error(w, "endpoints are only served to localhost", http.StatusForbidden)
			return
		}
		var state any = []struct{}{}
		if opts.Endpoints != nil {
			state = opts.Endpoints()
		}
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		enc.Encode(state)
	})
	if debugHandlers != nil {
		debugHandlers(mux)
	}
	return mux
}

// debugHandlers adds the profiling endpoints of a -tags pprof build.
var debugHandlers func(*http.ServeMux)

func fromLoopback(r *http.Request) bool {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}
