package routestats

import (
	"strings"
	"time"

	"github.com/plexus-mesh/plexus/control/meshstats"
)

// Row is one route of one parent Service.
type Row struct {
	Key
	// Requests the client sent in the window, with their success rate,
	// rate (the effective RPS) and latency quantiles in ms.
	Requests    float64  `json:"requests"`
	SuccessRate *float64 `json:"successRate"`
	RPS         *float64 `json:"effectiveRps"`
	LatencyP50  *float64 `json:"latencyP50Ms"`
	LatencyP95  *float64 `json:"latencyP95Ms"`
	LatencyP99  *float64 `json:"latencyP99Ms"`
	// ActualRPS counts attempts, retries included (backend requests).
	ActualRPS *float64 `json:"actualRps"`
	// Counts in the window.
	Retries            float64 `json:"retries"`
	RetrySuccesses     float64 `json:"retrySuccesses"`
	RetryLimitExceeded float64 `json:"retryLimitExceeded"`
	RetryOverflow      float64 `json:"retryOverflow"`
	Timeouts           float64 `json:"timeouts"`
}

// Compute derives a Row from a route's counters measured over window.
func Compute(k Key, c *Counts, window time.Duration) Row {
	s := meshstats.Compute(c.Requests, window)
	r := Row{
		Key: k, Requests: s.Requests, SuccessRate: s.SuccessRate, RPS: s.RPS,
		LatencyP50: s.LatencyP50, LatencyP95: s.LatencyP95, LatencyP99: s.LatencyP99,
		Retries: c.Retries, RetrySuccesses: c.RetrySuccesses, RetryLimitExceeded: c.RetryLimitExceeded,
		RetryOverflow: c.RetryOverflow, Timeouts: c.Timeouts,
	}
	if window > 0 && (c.BackendRequests > 0 || s.Requests > 0) {
		actual := c.BackendRequests / window.Seconds()
		r.ActualRPS = &actual
	}
	return r
}

// RouteName is namespace/kind/name, leaving out empty parts (a default
// route has no namespace).
func RouteName(r Ref) string {
	var parts []string
	for _, p := range []string{r.Namespace, r.Kind, r.Name} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "/")
}

// ServiceName is namespace/name:port of the parent.
func ServiceName(p Ref) string {
	s := p.Name
	if p.Namespace != "" {
		s = p.Namespace + "/" + s
	}
	if p.Port != "" {
		s += ":" + p.Port
	}
	if s == "" {
		return "-"
	}
	return s
}
