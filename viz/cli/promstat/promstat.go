// Package promstat answers plexusctl viz stat and viz routes from the viz
// extension's Prometheus (viz/vizquery), with the rows, and so the
// output, of plexusctl stat and routes: the objects and their meshed
// pods come from the Kubernetes API as stat finds them, the figures from
// Prometheus over a window instead of two scrapes of each proxy.
package promstat

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/control/routestats"
	"github.com/plexus-mesh/plexus/viz/cli"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

// Querier is what is asked of Prometheus (*vizquery.Client).
type Querier interface {
	Golden(ctx context.Context, level vizquery.Level, f vizquery.Filter, window time.Duration) ([]vizquery.Golden, error)
	Routes(ctx context.Context, f vizquery.Filter, window time.Duration) ([]routestats.Row, error)
}

// Stat measures from Prometheus; Kube finds the objects and their pods.
type Stat struct {
	Kube   stat.Stat
	Prom   Querier
	Window time.Duration
}

// Run returns one row per object cfg names (cfg.Window is not used;
// s.Window is the rate window). With cfg.Namespace "" deployments and
// pods of every namespace are measured.
func (s Stat) Run(ctx context.Context, cfg stat.Config) ([]stat.Row, error) {
	if s.Window <= 0 {
		return nil, errors.New("stat: no window")
	}
	targets, err := s.targets(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	level, f := query(cfg.Resource, cfg.Namespace, cfg.Name)
	golden, err := s.Prom.Golden(ctx, level, f, s.Window)
	if err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	byKey := map[[2]string]vizquery.Golden{}
	for _, g := range golden {
		if cfg.Resource == stat.Deployments && g.WorkloadKind != vizcli.Deployments.Object() {
			continue
		}
		byKey[rowKey(cfg.Resource, g.Key)] = g
	}
	rows := make([]stat.Row, 0, len(targets))
	for _, t := range targets {
		row := stat.Row{Namespace: t.Namespace, Name: t.Name, Meshed: t.Meshed, Total: t.Total}
		key := [2]string{t.Namespace, t.Name}
		if cfg.Resource == stat.Namespaces {
			key = [2]string{t.Name, ""}
		}
		g := byKey[key]
		row.Stats = g.Stats
		if len(t.Pods) > g.PodsUp {
			row.Errors = append(row.Errors, fmt.Sprintf("Prometheus scraped %d of %d running meshed pods", g.PodsUp, len(t.Pods)))
		}
		rows = append(rows, row)
	}
	return rows, nil
}

// targets lists the objects, every namespace's for deployments and pods
// when cfg.Namespace is "" (stat.Stat.Targets reads one namespace).
func (s Stat) targets(ctx context.Context, cfg stat.Config) ([]stat.Target, error) {
	if cfg.Resource == stat.Namespaces || cfg.Namespace != "" {
		return s.Kube.Targets(ctx, cfg)
	}
	nss, err := s.Kube.Targets(ctx, stat.Config{Resource: stat.Namespaces})
	if err != nil {
		return nil, err
	}
	var all []stat.Target
	for _, ns := range nss {
		one := cfg
		one.Namespace = ns.Name
		ts, err := s.Kube.Targets(ctx, one)
		if err != nil && cfg.Name == "" {
			return nil, err
		}
		all = append(all, ts...)
	}
	if cfg.Name != "" && len(all) == 0 {
		return nil, fmt.Errorf("%s %s not found in any namespace", cfg.Resource, cfg.Name)
	}
	return all, nil
}

// query is the level and filter of a stat of resource.
func query(resource stat.Resource, ns, name string) (vizquery.Level, vizquery.Filter) {
	switch resource {
	case stat.Namespaces:
		return vizquery.ByNamespace, vizquery.Filter{Namespace: name}
	case stat.Deployments:
		return vizquery.ByWorkload, vizquery.Filter{Namespace: ns, WorkloadKind: vizcli.Deployments.Object(), WorkloadName: name}
	}
	return vizquery.ByPod, vizquery.Filter{Namespace: ns, Pod: name}
}

// rowKey is the namespace and name of the object a row of golden
// metrics is about.
func rowKey(resource stat.Resource, k vizquery.Key) [2]string {
	switch resource {
	case stat.Namespaces:
		return [2]string{k.Namespace, ""}
	case stat.Deployments:
		return [2]string{k.Namespace, k.WorkloadName}
	}
	return [2]string{k.Namespace, k.Pod}
}

// RouteFilter selects the proxies of one object: a namespace, a pod, or
// a workload of any kind.
func RouteFilter(t vizcli.Target, ns string) vizquery.Filter {
	switch t.Kind {
	case vizcli.Namespaces:
		return vizquery.Filter{Namespace: t.Name}
	case vizcli.Pods:
		return vizquery.Filter{Namespace: ns, Pod: t.Name}
	}
	return vizquery.Filter{Namespace: ns, WorkloadKind: t.Kind.Object(), WorkloadName: t.Name}
}

// Routes returns the per-route rows of the proxies f selects, routes
// without requests in the window left out (as plexusctl routes leaves
// out routes that never carried one).
func Routes(ctx context.Context, prom Querier, f vizquery.Filter, window time.Duration) ([]routestats.Row, error) {
	rows, err := prom.Routes(ctx, f, window)
	if err != nil {
		return nil, fmt.Errorf("routes: %w", err)
	}
	out := rows[:0]
	for _, r := range rows {
		if r.Requests > 0 || r.ActualRPS != nil && *r.ActualRPS > 0 {
			out = append(out, r)
		}
	}
	return out, nil
}
