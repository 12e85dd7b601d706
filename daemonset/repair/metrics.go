package repair

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the repair's Prometheus metrics.
type Metrics struct {
	// Repairs counts by action: applied, deleted, reported (mode off, or
	// a pod delete mode leaves alone), failed (a check or repair attempt
	// that failed and is retried).
	Repairs *prometheus.CounterVec
	// Checked counts the checks of running meshed pods' rules.
	Checked prometheus.Counter
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		Repairs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "plexus_node_repairs_total",
			Help: "Meshed pods found without their redirect rules, by action (applied, deleted, reported, failed).",
		}, []string{"action"}),
		Checked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "plexus_node_pods_checked_total",
			Help: "Checks of a running meshed pod's redirect rules.",
		}),
	}
	for _, a := range []Outcome{Applied, Deleted, Reported, failed} {
		m.Repairs.WithLabelValues(string(a)) // export zeros, for alerts on increase()
	}
	for _, c := range []prometheus.Collector{m.Repairs, m.Checked} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("registering repair metrics: %w", err)
		}
	}
	return m, nil
}
