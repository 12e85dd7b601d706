// Package webtest gives the dashboard fake sources shaped like the demo
// application (plexus-demo: load → web → books and votes), for the
// dashboard's tests and its browser tests.
package webtest

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/control/meshstats"
	"github.com/plexus-mesh/plexus/control/routestats"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/viz/dashboard"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

// Namespace is the fake application's namespace.
const Namespace = "plexus-demo"

// Workloads are its Deployments.
var Workloads = []string{"books", "load", "votes", "web"}

// MeshedEdges are its secured edges, source → destination.
var MeshedEdges = [][2]string{{"load", "web"}, {"web", "books"}, {"web", "votes"}}

// Sources returns fake sources: Metrics answer from fixed figures (an
// error for namespace "broken"), Tap sends a request every interval
// until its context ends, Checks pass.
func Sources(interval time.Duration) dashboard.Sources {
	return dashboard.Sources{Metrics: Metrics{}, Tap: Tap(interval), Checks: Checks}
}

// Metrics are fixed figures of the demo.
type Metrics struct{}

func f(v float64) *float64 { return &v }

func stats(rps, success float64) meshstats.Stats {
	return meshstats.Stats{Requests: rps * 60, SuccessRate: f(success), RPS: f(rps), LatencyP50: f(3), LatencyP95: f(9), LatencyP99: f(19), TLSShare: f(0.98)}
}

// Golden answers rows for the namespace, its workloads and two pods each.
func (Metrics) Golden(_ context.Context, level vizquery.Level, flt vizquery.Filter, _ time.Duration) ([]vizquery.Golden, error) {
	if flt.Namespace == "broken" {
		return nil, fmt.Errorf("prometheus query sum by (namespace): connection refused")
	}
	var out []vizquery.Golden
	for _, w := range Workloads {
		if flt.WorkloadName != "" && flt.WorkloadName != w {
			continue
		}
		k := vizquery.Key{Namespace: Namespace, WorkloadKind: "Deployment", WorkloadName: w}
		g := vizquery.Golden{Key: k, Stats: stats(10, 0.995), MeshedShare: f(0.98), Pods: 2, PodsUp: 2}
		switch level {
		case vizquery.ByNamespace:
			return []vizquery.Golden{{Key: vizquery.Key{Namespace: Namespace}, Stats: stats(40, 0.99), MeshedShare: f(0.98), Pods: 8, PodsUp: 8}}, nil
		case vizquery.ByPod:
			for i := range 2 {
				p := g
				p.Pod = fmt.Sprintf("%s-7d9f-%d", w, i)
				p.Pods, p.PodsUp = 1, 1
				out = append(out, p)
			}
		default:
			out = append(out, g)
		}
	}
	return out, nil
}

// Sparklines are 30 minutes of slowly varying figures for each workload.
func (Metrics) Sparklines(_ context.Context, level vizquery.Level, flt vizquery.Filter, span, step time.Duration) (map[vizquery.Key]vizquery.Sparklines, error) {
	end := time.Now().Truncate(step)
	out := map[vizquery.Key]vizquery.Sparklines{}
	for i, w := range Workloads {
		if flt.WorkloadName != "" && flt.WorkloadName != w {
			continue
		}
		sl := vizquery.Sparklines{Start: end.Add(-span), End: end, Step: step}
		for t := sl.Start; !t.After(end); t = t.Add(step) {
			x := float64(t.Unix()/int64(step.Seconds())%20) / 20
			sl.SuccessRate = append(sl.SuccessRate, vizquery.Point{Time: t, Value: f(0.97 + 0.03*x)})
			sl.RPS = append(sl.RPS, vizquery.Point{Time: t, Value: f(float64(5+i) + 3*x)})
			sl.LatencyP99 = append(sl.LatencyP99, vizquery.Point{Time: t, Value: f(15 + 10*x)})
		}
		out[vizquery.Key{Namespace: Namespace, WorkloadKind: "Deployment", WorkloadName: w}] = sl
	}
	return out, nil
}

// Edges are MeshedEdges and the kubelet's unmeshed probes of web.
func (Metrics) Edges(_ context.Context, ns string, _ time.Duration) ([]vizquery.Edge, error) {
	if ns != Namespace {
		return nil, nil
	}
	id := func(sa string) string { return "spiffe://cluster.local/ns/" + Namespace + "/sa/" + sa }
	wl := func(n string) vizquery.Workload {
		return vizquery.Workload{Namespace: Namespace, Kind: "Deployment", Name: n}
	}
	var out []vizquery.Edge
	for _, e := range MeshedEdges {
		out = append(out, vizquery.Edge{Source: wl(e[0]), Destination: wl(e[1]), ClientID: id(e[0]), ServerID: id(e[1]), Secured: true, Protocol: "http", RPS: 10, OpenConnections: 2})
	}
	out = append(out, vizquery.Edge{Source: vizquery.Workload{Name: vizquery.Unmeshed}, Destination: wl("web"), Protocol: "http", RPS: 0.2})
	return out, nil
}

// Routes are web's canary route to books.
func (Metrics) Routes(_ context.Context, flt vizquery.Filter, window time.Duration) ([]routestats.Row, error) {
	if flt.WorkloadName != "web" {
		return nil, nil
	}
	k := routestats.Key{Protocol: routestats.HTTP,
		Parent: routestats.Ref{Kind: "Service", Namespace: Namespace, Name: "books", Port: "8080"},
		Route:  routestats.Ref{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Namespace: Namespace, Name: "books-canary"}}
	c := &routestats.Counts{Requests: meshstats.Counts{Success: 590, Failure: 10, Buckets: map[float64]float64{5: 500, 10: 590, math.Inf(1): 600}}, BackendRequests: 615, Retries: 15}
	return []routestats.Row{routestats.Compute(k, c, window)}, nil
}

// Health is a Prometheus scraping every fake pod.
func (Metrics) Health(context.Context) (vizquery.Health, error) {
	return vizquery.Health{Version: "3.16.0", ProxyTargets: 8, ProxyTargetsUp: 8}, nil
}

// Tap sends web's inbound requests, one every interval, until ctx ends.
func Tap(interval time.Duration) dashboard.TapFunc {
	return func(ctx context.Context, ns, resource, name string, req tapapi.Request, fn func(tapapi.Event) error) error {
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for n := 0; ; n++ {
			select {
			case <-ctx.Done():
				return nil
			case <-tick.C:
			}
			id := fmt.Sprintf("web-7d9f-0:%d", n)
			src := tapapi.Peer{Addr: "10.42.0.7:41234", Identity: "spiffe://cluster.local/ns/plexus-demo/sa/load", Namespace: ns, WorkloadKind: "Deployment", WorkloadName: "load"}
			dst := tapapi.Peer{Addr: "10.42.0.9:8080", Namespace: ns, Pod: "web-7d9f-0", WorkloadKind: "Deployment", WorkloadName: "web"}
			base := tapapi.Event{ID: id, Namespace: ns, Pod: "web-7d9f-0", Direction: "inbound", Source: src, Destination: dst, TLS: true}
			method := "GET"
			if req.Method != "" {
				method = req.Method
			}
			path := "/books/" + fmt.Sprint(n%7)
			if req.PathPrefix != "" {
				path = req.PathPrefix + fmt.Sprint(n)
			}
			start, resp, end := base, base, base
			start.Type, start.Time, start.Method, start.Scheme, start.Authority, start.Path = tapapi.RequestStart, time.Now(), method, "http", "web.plexus-demo:8080", path
			start.Headers = []tapapi.Header{{Name: "user-agent", Value: "load"}, {Name: "authorization", Value: tapapi.Redacted}}
			resp.Type, resp.Time, resp.Status, resp.LatencyMs = tapapi.ResponseStart, time.Now(), 200, 4.2
			end.Type, end.Time, end.DurationMs, end.ResponseBytes = tapapi.ResponseEnd, time.Now(), 4.9, 512
			for _, ev := range []tapapi.Event{start, resp, end} {
				if err := fn(ev); err != nil {
					return err
				}
			}
		}
	}
}

// Checks pass, but for a warning.
func Checks(context.Context) []healthcheck.Result {
	return []healthcheck.Result{
		{Name: "control plane Deployment plexus-identity is available", Status: healthcheck.OK},
		{Name: "control plane Deployment plexus-destination is available", Status: healthcheck.OK},
		{Name: "identity issuer certificate is valid and chains to the trust anchors", Status: healthcheck.Warn, Detail: "issuer \"identity.plexus-system\" expires in 700h0m0s", Hint: "create a new issuer"},
	}
}
