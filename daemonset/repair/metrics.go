package repair

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
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
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		Repairs: f.NewCounterVec(prometheus.CounterOpts{Name: "plexus_node_repairs_total", Help: "Meshed pods found without their redirect rules, by action (applied, deleted, reported, failed)."}, []string{"action"}),
		Checked: f.NewCounter(prometheus.CounterOpts{Name: "plexus_node_pods_checked_total", Help: "Checks of a running meshed pod's redirect rules."}),
	}
	for _, a := range []Outcome{Applied, Deleted, Reported, failed} {
		m.Repairs.WithLabelValues(string(a)) // export zeros, for alerts on increase()
	}
	return m
}
