package proxy

import (
	"net/http"
	"net/netip"

	"github.com/plexus-mesh/plexus/mesh/policy/authz"
	"github.com/plexus-mesh/plexus/mesh/policy/pathnorm"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// The proxy's own ports obey the inbound policy too: the admin port and
// the redirect probe port (ARCHITECTURE.md §9). Destination gives each the
// pod's policy for it, with a probe route that lets the node reach the
// paths the pod's probes use. Before a policy has arrived only the probe
// paths are answered (fail closed, except probes). On the admin port a
// client on the pod's loopback is always let in, whatever the policy (as
// Linkerd's default:localhost): it is the pod itself, or an operator's
// port-forward (plexusctl diagnostics proxy-metrics), which the API
// server has already authorized.

// probePaths are the admin paths the kubelet's probes use.
var probePaths = map[string]bool{"/live": true, "/ready": true}

// authorizeAdmin returns h behind the inbound policy of port (the admin
// port, or the redirect probe port), loopback clients let in when
// loopback is set; pols nil: h as is.
func authorizeAdmin(pols InboundPolicies, port uint16, loopback bool, m *metrics.Metrics, h http.Handler) http.Handler {
	if pols == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := netip.Addr{}
		if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
			client = ap.Addr().Unmap()
		}
		// The policy and the mux decide on one path: the normal form.
		target := r.URL.RequestURI()
		norm, err := pathnorm.Target(target)
		if err != nil {
			w.Header().Set(httpproxy.ErrorHeader, httpproxy.ReasonInvalidPath)
			w.Header().Set("Connection", "close")
			http.Error(w, "plexus-proxy: "+httpproxy.ReasonInvalidPath, http.StatusBadRequest)
			return
		}
		if norm != target {
			pathnorm.SetURL(r.URL, norm)
		}
		pol := pols.InboundPolicy(r.Context(), port)
		var d authz.Decision
		switch {
		case loopback && client.IsLoopback():
			d = authz.Decision{Allowed: true}
		case pol != nil:
			rq := routes.Request{Method: r.Method, Authority: r.Host, Target: norm, Header: r.Header}
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
			switch {
			case d.InvalidPath != "":
				status, reason = http.StatusBadRequest, httpproxy.ReasonInvalidPath
			case d.NoRoute:
				status, reason = http.StatusNotFound, httpproxy.ReasonNoRoute
			}
			w.Header().Set(httpproxy.ErrorHeader, reason)
			// A refused client gets no connection to hold.
			w.Header().Set("Connection", "close")
			http.Error(w, "plexus-proxy: "+reason, status)
			return
		}
		h.ServeHTTP(w, r)
	})
}
