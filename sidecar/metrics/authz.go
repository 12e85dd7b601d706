package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// Authorization metrics, Linkerd's names (ARCHITECTURE.md §9): per Server
// (srv_*), route (route_*) and authorization (authz_*), with the client's
// mesh TLS; dry_run="true" counts what audit or a dry-run policy let
// through that enforcement would have denied. The label values come from
// the policies destination sends and the bounded client_id.
type authzMetrics struct {
	httpAllow, httpDeny, tcpAllow, tcpDeny, tcpTerminate, rateLimited *prometheus.CounterVec
}

var (
	srvLabels   = []string{"srv_group", "srv_kind", "srv_name", "srv_port"}
	routeLabels = []string{"route_group", "route_kind", "route_name"}
	authzLabels = []string{"authz_group", "authz_kind", "authz_name"}
	peerLabels  = []string{"tls", "client_id"}
)

func labels(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func newAuthzMetrics() authzMetrics {
	counter := func(name, help string, ls []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, ls)
	}
	return authzMetrics{
		httpAllow: counter("inbound_http_authz_allow_total", "Inbound HTTP requests the policy authorized.",
			labels(srvLabels, routeLabels, authzLabels, peerLabels, []string{"dry_run"})),
		httpDeny: counter("inbound_http_authz_deny_total", "Inbound HTTP requests the policy denied (dry_run=\"true\": reported, let through).",
			labels(srvLabels, routeLabels, peerLabels, []string{"dry_run"})),
		tcpAllow: counter("inbound_tcp_authz_allow_total", "Inbound connections the policy authorized (opaque: per connection).",
			labels(srvLabels, authzLabels, peerLabels)),
		tcpDeny: counter("inbound_tcp_authz_deny_total", "Inbound connections the policy refused (dry_run=\"true\": reported, let through).",
			labels(srvLabels, peerLabels, []string{"dry_run"})),
		tcpTerminate: counter("inbound_tcp_authz_terminate_total", "Open inbound connections closed because a policy change revoked the client's access.",
			labels(srvLabels, peerLabels)),
		rateLimited: counter("inbound_http_local_ratelimit_total", "Inbound HTTP requests refused 429 by the Server's HTTPLocalRateLimitPolicy.",
			labels(srvLabels, []string{"ratelimit_group", "ratelimit_kind", "ratelimit_name"}, peerLabels)),
	}
}

func (a authzMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{a.httpAllow, a.httpDeny, a.tcpAllow, a.tcpDeny, a.tcpTerminate, a.rateLimited}
}

// AuthzResult is one decision to count.
type AuthzResult struct {
	Server, Route, Authz *destinationpb.ResourceRef
	Port                 uint16
	TLS                  TLS
	Allowed, DryRun      bool
}

// values are a result's label values, built without allocating (the
// port's text is cached): at most 15.
type values struct {
	buf [15]string
	n   int
}

func (v *values) add(s ...string) *values {
	v.n += copy(v.buf[v.n:], s)
	return v
}

func (v *values) ref(r *destinationpb.ResourceRef) *values {
	return v.add(r.GetGroup(), r.GetKind(), r.GetName())
}

func (v *values) get() []string { return v.buf[:v.n] }

func (m *Metrics) srv(v *values, r AuthzResult) *values {
	port := ""
	if r.Port != 0 {
		port = m.portText(r.Port)
	}
	return v.ref(r.Server).add(port)
}

func peer(v *values, r AuthzResult) *values {
	tls, client, _ := r.TLS.values(Inbound)
	return v.add(tls, client)
}

// portText returns port as text, cached per port (label values are
// built per request).
func (m *Metrics) portText(port uint16) string {
	m.portsMu.RLock()
	s, ok := m.ports[port]
	m.portsMu.RUnlock()
	if ok {
		return s
	}
	s = strconv.Itoa(int(port))
	m.portsMu.Lock()
	if len(m.ports) < 1024 {
		m.ports[port] = s
	}
	m.portsMu.Unlock()
	return s
}

// HTTPAuthz counts an inbound request's authorization.
func (m *Metrics) HTTPAuthz(r AuthzResult) {
	var v values
	m.srv(&v, r).ref(r.Route)
	if r.Allowed && !r.DryRun {
		peer(v.ref(r.Authz), r).add("false")
		m.authz.httpAllow.WithLabelValues(v.get()...).Inc()
		return
	}
	peer(&v, r).add(strconv.FormatBool(r.DryRun))
	m.authz.httpDeny.WithLabelValues(v.get()...).Inc()
}

// TCPAuthz counts an inbound connection's authorization.
func (m *Metrics) TCPAuthz(r AuthzResult) {
	var v values
	m.srv(&v, r)
	if r.Allowed && !r.DryRun {
		peer(v.ref(r.Authz), r)
		m.authz.tcpAllow.WithLabelValues(v.get()...).Inc()
		return
	}
	peer(&v, r).add(strconv.FormatBool(r.DryRun))
	m.authz.tcpDeny.WithLabelValues(v.get()...).Inc()
}

// TCPAuthzTerminated counts a live connection closed on revocation.
func (m *Metrics) TCPAuthzTerminated(r AuthzResult) {
	var v values
	peer(m.srv(&v, r), r)
	m.authz.tcpTerminate.WithLabelValues(v.get()...).Inc()
}

// RateLimited counts a request refused by a rate limit (r.Authz names the
// HTTPLocalRateLimitPolicy).
func (m *Metrics) RateLimited(r AuthzResult) {
	var v values
	peer(m.srv(&v, r).ref(r.Authz), r)
	m.authz.rateLimited.WithLabelValues(v.get()...).Inc()
}
