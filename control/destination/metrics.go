package destination

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// RPC label values.
const (
	rpcGet        = "get"
	rpcGetProfile = "get_profile"
	// rpcGetOutboundPolicy labels GetOutboundPolicy streams.
	rpcGetOutboundPolicy = "get_outbound_policy"
	// rpcGetInboundPolicy labels GetInboundPolicy streams.
	rpcGetInboundPolicy = "get_inbound_policy"
)

// metrics are the server's Prometheus collectors, registered on the
// registry given to New.
type metrics struct {
	streams  *prometheus.GaugeVec   // open streams, by rpc
	updates  *prometheus.CounterVec // messages queued to streams, by rpc and kind
	overflow *prometheus.CounterVec // streams ended by a full queue, by rpc
	refused  *prometheus.CounterVec // streams refused to their caller, by rpc and reason
	// statusLeader is 1 while this replica writes route status.
	statusLeader prometheus.Gauge
	// statusWrites counts route status updates sent, by result.
	statusWrites *prometheus.CounterVec
	// gatewayHealthy is 1 while a linked cluster's gateway answers its
	// health checks, by cluster (gatewayhealth.go).
	gatewayHealthy *prometheus.GaugeVec
	// gatewayLatency is the last successful health check's duration.
	gatewayLatency *prometheus.GaugeVec
	// apiHealthy and apiLatency: the same of its API server.
	apiHealthy, apiLatency *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		streams:        f.NewGaugeVec(prometheus.GaugeOpts{Name: "plexus_destination_streams", Help: "Open destination streams, by rpc."}, []string{"rpc"}),
		updates:        f.NewCounterVec(prometheus.CounterOpts{Name: "plexus_destination_updates_total", Help: "Messages queued to destination streams, by rpc and kind (add, remove, no_endpoints, profile)."}, []string{"rpc", "kind"}),
		overflow:       f.NewCounterVec(prometheus.CounterOpts{Name: "plexus_destination_stream_overflow_total", Help: "Destination streams ended because their update queue overflowed, by rpc."}, []string{"rpc"}),
		gatewayHealthy: f.NewGaugeVec(prometheus.GaugeOpts{Name: "plexus_destination_gateway_healthy", Help: "1 while the linked cluster's multicluster gateway answers destination's health checks, 0 while its gateway-mode endpoints are withdrawn, by cluster."}, []string{"cluster"}),
		gatewayLatency: f.NewGaugeVec(prometheus.GaugeOpts{Name: "plexus_destination_gateway_probe_seconds", Help: "How long the last successful health check of the linked cluster's multicluster gateway took (connect, check, clean close), by cluster."}, []string{"cluster"}),
		apiHealthy:     f.NewGaugeVec(prometheus.GaugeOpts{Name: "plexus_destination_remote_api_healthy", Help: "1 while the linked cluster's API server answers destination's readiness checks, 0 while its members of federated Services are withdrawn, by cluster."}, []string{"cluster"}),
		apiLatency:     f.NewGaugeVec(prometheus.GaugeOpts{Name: "plexus_destination_remote_api_probe_seconds", Help: "How long the last successful readiness check of the linked cluster's API server took (connect, TLS, GET /readyz), by cluster."}, []string{"cluster"}),
		statusLeader:   f.NewGauge(prometheus.GaugeOpts{Name: "plexus_destination_status_leader", Help: "1 while this replica holds the route status lease and writes route status, else 0."}),
		statusWrites:   f.NewCounterVec(prometheus.CounterOpts{Name: "plexus_destination_status_writes_total", Help: "Route status updates sent to the API server, by result (ok, error)."}, []string{"result"}),
		refused:        f.NewCounterVec(prometheus.CounterOpts{Name: "plexus_destination_refused_streams_total", Help: "Destination streams refused to their caller, by rpc and reason: no_client_certificate, invalid_identity, foreign_trust_domain (Unauthenticated), identity_stream_limit, loopback_stream_limit, address_stream_limit (ResourceExhausted), not_own_pod (PermissionDenied)."}, []string{"rpc", "reason"}),
	}
	return m
}
