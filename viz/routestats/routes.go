// Package routestats shows per-route traffic of the requests a workload's
// proxies send (outbound_http_route_* and outbound_grpc_route_*, DESIGN.md
// §8), scraped through the API server exactly as stat does: two scrapes a
// window apart per meshed pod, summed over the pods, one row per route
// and parent Service.
package routestats

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/viz/meshstats"
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

// Result is a measurement: rows sorted by parent and route, and the pods
// that could not be scraped (left out of the figures).
type Result struct {
	Rows   []Row
	Errors []string
}

// Routes measures; Stat selects and scrapes the pods.
type Routes struct {
	Stat stat.Stat
}

// Run measures the routes of the one object cfg names.
func (r Routes) Run(ctx context.Context, cfg stat.Config) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, fmt.Errorf("routes: %w", err)
	}
	if cfg.Name == "" {
		return Result{}, errors.New("routes: want one object")
	}
	targets, err := r.Stat.Targets(ctx, cfg)
	if err != nil {
		return Result{}, fmt.Errorf("routes: %w", err)
	}
	if len(targets) != 1 {
		return Result{}, fmt.Errorf("routes: %s %s names %d objects, want one", cfg.Resource, cfg.Name, len(targets))
	}
	t := targets[0]
	if len(t.Pods) == 0 {
		return Result{}, fmt.Errorf("routes: %s %s has no running meshed pod (%d of %d pods meshed)", cfg.Resource, t.Name, t.Meshed, t.Total)
	}
	m, err := r.Stat.Measure(ctx, t.Pods, cfg.Window)
	if err != nil {
		return Result{}, fmt.Errorf("routes: %w", err)
	}
	var res Result
	sum := map[Key]*Counts{}
	used := map[Key]bool{} // routes that ever had a request: the others are left out
	for _, p := range t.Pods {
		var b, a map[Key]*Counts
		err := m.Err(p)
		if err == nil {
			b, err = Parse(m.Before[p].Text)
		}
		if err == nil {
			a, err = Parse(m.After[p].Text)
		}
		if err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", p.Name, err))
			continue
		}
		Add(sum, Delta(b, a))
		for k, c := range a {
			if c.Requests.Total() > 0 || c.BackendRequests > 0 {
				used[k] = true
			}
		}
	}
	if len(res.Errors) == len(t.Pods) {
		return Result{}, fmt.Errorf("routes: no pod of %s %s could be scraped: %s", cfg.Resource, t.Name, strings.Join(res.Errors, "; "))
	}
	for k, c := range sum {
		// A proxy keeps the series of a route it no longer has (the
		// default route before an HTTPRoute replaced it): a route that
		// never carried a request is noise.
		if used[k] {
			res.Rows = append(res.Rows, Compute(k, c, m.Elapsed))
		}
	}
	sort.Slice(res.Rows, func(i, j int) bool { return less(res.Rows[i].Key, res.Rows[j].Key) })
	return res, nil
}

func less(a, b Key) bool {
	return slices.Compare(sortKey(a), sortKey(b)) < 0
}

// sortKey orders rows by parent Service, then route, then every other
// label, so that the order is total.
func sortKey(k Key) []string {
	p, r := k.Parent, k.Route
	return []string{p.Namespace, p.Name, p.Port, p.Section, p.Kind, p.Group, r.Namespace, r.Kind, r.Name, r.Section, r.Group, r.Port, k.Protocol}
}
