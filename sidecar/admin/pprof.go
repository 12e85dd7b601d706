//go:build pprof

package admin

import (
	"net/http"
	"net/http/pprof"
)

// A proxy built with -tags pprof (for profiling, never shipped: the
// package would add to every proxy's binary and memory) serves Go's
// profiles at /debug/pprof/ on the admin port, to localhost only.
func init() {
	debugHandlers = func(mux *http.ServeMux) {
		mux.HandleFunc("GET /debug/pprof/", func(w http.ResponseWriter, r *http.Request) {
			if !fromLoopback(r) {
				http.Error(w, "profiles are only served to localhost", http.StatusForbidden)
				return
			}
			switch r.URL.Path {
			case "/debug/pprof/profile":
				pprof.Profile(w, r)
			default:
				pprof.Index(w, r)
			}
		})
	}
}
