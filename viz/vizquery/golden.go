package vizquery

import (
	"context"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/plexus-mesh/plexus/control/meshstats"
)

// Golden is one row of golden metrics: plexusctl stat's figures (rates
// over the window, the quantiles by histogram_quantile over
// response_latency_ms) and the share of requests from meshed clients.
type Golden struct {
	Key
	meshstats.Stats
	// MeshedShare is the share of requests whose client proved a mesh
	// identity (a client_id, or mesh TLS), 0..1; nil without traffic.
	MeshedShare *float64 `json:"meshedShare"`
	// Pods are the proxies Prometheus scrapes for this row; PodsUp, those
	// whose last scrape succeeded.
	Pods   int `json:"pods"`
	PodsUp int `json:"podsUp"`
}

// goldenAcc sums one row's rates.
type goldenAcc struct {
	total, success, tls, meshed float64
	p50, p95, p99               *float64
	pods, podsUp                int
}

// Golden returns one row per namespace, workload or pod (level) that f
// selects and that has a scraped proxy or inbound traffic in the last
// window, sorted by key.
func (c *Client) Golden(ctx context.Context, level Level, f Filter, window time.Duration) ([]Golden, error) {
	group, err := level.labels()
	if err != nil {
		return nil, err
	}
	vs, err := c.vectors(ctx,
		qGoldenCounts(group, f, window),
		qGoldenQuantile(0.5, group, f, window),
		qGoldenQuantile(0.95, group, f, window),
		qGoldenQuantile(0.99, group, f, window),
		qTargets("count", group, f),
		qTargets("sum", group, f),
	)
	if err != nil {
		return nil, err
	}
	rows := map[Key]*goldenAcc{}
	get := func(m model.Metric) *goldenAcc {
		k := keyOf(m)
		a := rows[k]
		if a == nil {
			a = &goldenAcc{}
			rows[k] = a
		}
		return a
	}
	for _, s := range vs[0] {
		a, v := get(s.Metric), value(s.Value)
		a.total += v
		if s.Metric[labelClass] == "success" {
			a.success += v
		}
		if s.Metric[labelTLS] == "true" {
			a.tls += v
		}
		if s.Metric[labelTLS] == "true" || s.Metric[labelClientID] != "" {
			a.meshed += v
		}
	}
	for i, q := range []func(*goldenAcc) **float64{
		func(a *goldenAcc) **float64 { return &a.p50 },
		func(a *goldenAcc) **float64 { return &a.p95 },
		func(a *goldenAcc) **float64 { return &a.p99 },
	} {
		for _, s := range vs[1+i] {
			*q(get(s.Metric)) = optional(s.Value)
		}
	}
	for _, s := range vs[4] {
		get(s.Metric).pods = int(value(s.Value))
	}
	for _, s := range vs[5] {
		get(s.Metric).podsUp = int(value(s.Value))
	}
	out := make([]Golden, 0, len(rows))
	for _, k := range sortedKeys(rows) {
		a := rows[k]
		g := Golden{Key: k, Pods: a.pods, PodsUp: a.podsUp}
		g.Requests = a.total * window.Seconds()
		if a.total > 0 {
			g.RPS = ptr(a.total)
			g.SuccessRate = ptr(a.success / a.total)
			g.TLSShare = ptr(a.tls / a.total)
			g.MeshedShare = ptr(a.meshed / a.total)
			g.LatencyP50, g.LatencyP95, g.LatencyP99 = a.p50, a.p95, a.p99
		}
		out = append(out, g)
	}
	return out, nil
}

func ptr(f float64) *float64 { return &f }

// Point is one sample of a sparkline; Value is nil where the figure is
// undefined (no traffic at that time).
type Point struct {
	Time  time.Time `json:"t"`
	Value *float64  `json:"v"`
}

// Sparklines are the recent history of one row's inbound traffic: success
// rate (0..1), requests per second and p99 latency in ms.
type Sparklines struct {
	Start       time.Time     `json:"start"`
	End         time.Time     `json:"end"`
	Step        time.Duration `json:"stepNs"`
	SuccessRate []Point       `json:"successRate"`
	RPS         []Point       `json:"rps"`
	LatencyP99  []Point       `json:"latencyP99Ms"`
}

// Sparklines returns the history of each row of level that f selects over
// the span up to now, a point every step (each a rate over the larger of
// step and DefaultWindow). Rows without traffic in the span are absent.
func (c *Client) Sparklines(ctx context.Context, level Level, f Filter, span, step time.Duration) (map[Key]Sparklines, error) {
	group, err := level.labels()
	if err != nil {
		return nil, err
	}
	end := c.Now().Truncate(step)
	r := v1.Range{Start: end.Add(-span), End: end, Step: step}
	w := max(step, DefaultWindow)
	ms, err := c.matrices(ctx, r, qSparkSuccess(group, f, w), qSparkRPS(group, f, w), qSparkP99(group, f, w))
	if err != nil {
		return nil, err
	}
	out := map[Key]Sparklines{}
	for i, m := range ms {
		for _, stream := range m {
			k := keyOf(stream.Metric)
			sl, ok := out[k]
			if !ok {
				sl = Sparklines{Start: r.Start, End: r.End, Step: step, SuccessRate: []Point{}, RPS: []Point{}, LatencyP99: []Point{}}
			}
			dst := []*[]Point{&sl.SuccessRate, &sl.RPS, &sl.LatencyP99}[i]
			for _, p := range stream.Values {
				*dst = append(*dst, Point{Time: p.Timestamp.Time().UTC(), Value: optional(p.Value)})
			}
			out[k] = sl
		}
	}
	return out, nil
}
