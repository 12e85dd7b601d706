package proxy

import (
	"net/http"
	"net/netip"

	"github.com/plexus-mesh/plexus/sidecar/authz"
	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/sidecar/routes"
)

// The proxy's own ports obey the inbound policy too: the admin port and
// the redirect probe port (DESIGN.md §9). Destination gives each the
// pod's policy for it, with a probe route that lets the node reach the
// paths the pod's probes use. Before a policy has arrived only the probe
// paths are answered (fail closed, except probes).

// probePaths are the admin paths the kubelet's probes use.
var probePaths = map[string]bool{"/live": true, "/ready": true}

// authorizeAdmin returns h behind the inbound policy of port (the admin
// port, or the redirect probe port); pols nil: h as is.
func authorizeAdmin(pols InboundPolicies, port uint16, m *metrics.Metrics, h http.Handler) http.Handler {
	if pols == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := netip.Addr{}
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			client = ap.Addr().Unmap()
		}
		pol := pols.InboundPolicy(r.Context(), port)
		var d authz.Decision
		switch {
		case pol != nil:
			rq := routes.Request{Method: r.Method, Authority: r.Host, Target: r.URL.RequestURI(), Header: r.Header}
			d = pol.Request(&authz.Client{Addr: client}, &rq)
		case r.Method == http.MethodGet && probePaths[r.URL.Path]:
			d = authz.Decision{Allowed: true}
		default:
			d = denied
		}
		if pol != nil && !d.NoRoute {
			m.HTTPAuthz(metrics.AuthzResult{Server: pol.Server, Route: d.Route, Authz: d.Authz, Port: port, Allowed: d.Allowed, DryRun: d.DryRun})
		}
		if !d.Allowed {
			status, reason := http.StatusForbidden, httpproxy.ReasonUnauthorized
			if d.NoRoute {
				status, reason = http.StatusNotFound, httpproxy.ReasonNoRoute
			}
			w.Header().Set(httpproxy.ErrorHeader, reason)
			http.Error(w, "plexus-proxy: "+reason, status)
			return
		}
		h.ServeHTTP(w, r)
	})
}
