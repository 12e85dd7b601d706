package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/control/api/destinationpb"
)

// Authorization metrics, Linkerd's names (DESIGN.md §9): per Server
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

func refValues(r *destinationpb.ResourceRef) []string {
	return []string{r.GetGroup(), r.GetKind(), r.GetName()}
}

func (r AuthzResult) srv() []string {
	return append(refValues(r.Server), strconv.Itoa(int(r.Port)))
}

func (r AuthzResult) peer() []string {
	tls, client, _ := r.TLS.values(Inbound)
	return []string{tls, client}
}

// HTTPAuthz counts an inbound request's authorization.
func (m *Metrics) HTTPAuthz(r AuthzResult) {
	if r.Allowed && !r.DryRun {
		m.authz.httpAllow.WithLabelValues(labels(r.srv(), refValues(r.Route), refValues(r.Authz), r.peer(), []string{"false"})...).Inc()
		return
	}
	m.authz.httpDeny.WithLabelValues(labels(r.srv(), refValues(r.Route), r.peer(), []string{strconv.FormatBool(r.DryRun)})...).Inc()
}

// TCPAuthz counts an inbound connection's authorization.
func (m *Metrics) TCPAuthz(r AuthzResult) {
	if r.Allowed && !r.DryRun {
		m.authz.tcpAllow.WithLabelValues(labels(r.srv(), refValues(r.Authz), r.peer())...).Inc()
		return
	}
	m.authz.tcpDeny.WithLabelValues(labels(r.srv(), r.peer(), []string{strconv.FormatBool(r.DryRun)})...).Inc()
}

// TCPAuthzTerminated counts a live connection closed on revocation.
func (m *Metrics) TCPAuthzTerminated(r AuthzResult) {
	m.authz.tcpTerminate.WithLabelValues(labels(r.srv(), r.peer())...).Inc()
}

// RateLimited counts a request refused by a rate limit (r.Authz names the
// HTTPLocalRateLimitPolicy).
func (m *Metrics) RateLimited(r AuthzResult) {
	m.authz.rateLimited.WithLabelValues(labels(r.srv(), refValues(r.Authz), r.peer())...).Inc()
}
