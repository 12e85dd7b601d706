package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connections *prometheus.CounterVec
	open        prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_gateway_connections_total",
			Help: "Connections the multicluster gateway accepted, by result: forwarded, bad_header (no valid PROXY v2 header in time), refused (the target is no meshed endpoint of a Service exported in gateway mode), unreachable (the target did not accept), limit (over the connection limits), health_check (a linked cluster's probe).",
		}, []string{"result"}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "plexus_gateway_open_connections",
			Help: "Connections the multicluster gateway is forwarding now.",
		}),
	}
	for _, r := range []string{resultForwarded, resultBadHeader, resultRefused, resultUnreachable, resultLimit, resultHealth} {
		m.connections.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.connections, m.open} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return m, nil
}
