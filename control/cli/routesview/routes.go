// Package routesview shows per-route traffic of the requests a workload's
// proxies send (outbound_http_route_* and outbound_grpc_route_*, ARCHITECTURE.md
// §8), scraped through the API server exactly as stat does: two scrapes a
// window apart per meshed pod, summed over the pods, one row per route
// and parent Service.
package routesview

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/control/routestats"
)

// Result is a measurement: rows sorted by parent and route, and the pods
// that could not be scraped (left out of the figures).
type Result struct {
	Rows   []routestats.Row
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
	sum := map[routestats.Key]*routestats.Counts{}
	used := map[routestats.Key]bool{} // routes that ever had a request: the others are left out
	for _, p := range t.Pods {
		var b, a map[routestats.Key]*routestats.Counts
		err := m.Err(p)
		if err == nil {
			b, err = routestats.Parse(m.Before[p].Text)
		}
		if err == nil {
			a, err = routestats.Parse(m.After[p].Text)
		}
		if err != nil {
			res.Errors = append(res.Errors, fmt.Sprintf("%s: %v", p.Name, err))
			continue
		}
		routestats.Add(sum, routestats.Delta(b, a))
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
			res.Rows = append(res.Rows, routestats.Compute(k, c, m.Elapsed))
		}
	}
	sort.Slice(res.Rows, func(i, j int) bool { return less(res.Rows[i].Key, res.Rows[j].Key) })
	return res, nil
}

func less(a, b routestats.Key) bool {
	return slices.Compare(sortKey(a), sortKey(b)) < 0
}

// sortKey orders rows by parent Service, then route, then every other
// label, so that the order is total.
func sortKey(k routestats.Key) []string {
	p, r := k.Parent, k.Route
	return []string{p.Namespace, p.Name, p.Port, p.Section, p.Kind, p.Group, r.Namespace, r.Kind, r.Name, r.Section, r.Group, r.Port, k.Protocol}
}
