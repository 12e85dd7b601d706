// Package meshstats turns two scrapes of a proxy's Prometheus metrics into
// traffic statistics of its inbound side (or of its outbound side, by a
// label such as the destination cluster): requests, success rate, RPS,
// latency quantiles and the share carried over mTLS.
package meshstats

import (
	"bytes"
	"fmt"
	"math"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Metric names and label values of the proxy (sidecar/metrics).
const (
	responseTotal   = "response_total"
	responseLatency = "response_latency_ms"
	Inbound         = "inbound"
	Outbound        = "outbound"
	// DstCluster names the linked cluster of an outbound request's
	// endpoint ("" for this cluster's).
	DstCluster = "dst_cluster"
)

// Counts are the inbound counters of one scrape (or a delta of two, or a
// sum over pods). Buckets maps a latency bucket's upper bound in ms
// (+Inf included) to its cumulative count.
type Counts struct {
	Success float64
	Failure float64
	TLS     float64 // responses to requests that arrived over mesh mTLS
	Buckets map[float64]float64
}

// Total is the number of responses.
func (c Counts) Total() float64 { return c.Success + c.Failure }

// Parse reads the inbound counters from one scrape in the Prometheus text
// format.
func Parse(text []byte) (Counts, error) {
	by, err := ParseBy(text, Inbound, "")
	if c, ok := by[""]; ok || err != nil {
		return c, err
	}
	return Counts{Buckets: map[float64]float64{}}, nil
}

// ParseBy reads the counters of direction from one scrape, summed by the
// value of label (all under "" when label is ""). A value with no series
// is absent.
func ParseBy(text []byte, direction, label string) (map[string]Counts, error) {
	fams, err := ParseText(text)
	if err != nil {
		return nil, err
	}
	by := map[string]Counts{}
	counts := func(l map[string]string) Counts {
		c, ok := by[l[label]]
		if !ok {
			c = Counts{Buckets: map[float64]float64{}}
		}
		return c
	}
	if f := fams[responseTotal]; f != nil {
		for _, m := range f.GetMetric() {
			l := Labels(m)
			if l["direction"] != direction {
				continue
			}
			c := counts(l)
			v := m.GetCounter().GetValue()
			if l["classification"] == "success" {
				c.Success += v
			} else {
				c.Failure += v
			}
			if l["tls"] == "true" {
				c.TLS += v
			}
			by[l[label]] = c
		}
	}
	if f := fams[responseLatency]; f != nil {
		for _, m := range f.GetMetric() {
			l := Labels(m)
			if l["direction"] != direction {
				continue
			}
			c := counts(l)
			AddHistogram(c.Buckets, m.GetHistogram(), 1)
			by[l[label]] = c
		}
	}
	return by, nil
}

// ParseText parses one scrape in the Prometheus text format.
func ParseText(text []byte) (map[string]*dto.MetricFamily, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(bytes.NewReader(text))
	if err != nil {
		return nil, fmt.Errorf("parsing proxy metrics: %w", err)
	}
	return fams, nil
}

// AddHistogram adds h's cumulative bucket counts to buckets, each upper
// bound multiplied by scale (1000 turns seconds into milliseconds), and
// its sample count as the +Inf bucket.
func AddHistogram(buckets map[float64]float64, h *dto.Histogram, scale float64) {
	for _, b := range h.GetBucket() {
		if math.IsInf(b.GetUpperBound(), 1) {
			continue // the sample count below is the +Inf bucket
		}
		buckets[b.GetUpperBound()*scale] += float64(b.GetCumulativeCount())
	}
	buckets[math.Inf(1)] += float64(h.GetSampleCount())
}

// Labels returns m's labels by name.
func Labels(m *dto.Metric) map[string]string {
	l := make(map[string]string, len(m.GetLabel()))
	for _, p := range m.GetLabel() {
		l[p.GetName()] = p.GetValue()
	}
	return l
}

// Delta is after minus before. A counter that went down means the proxy
// restarted between the scrapes; then after alone is the delta, as
// Prometheus's increase() would count it.
func Delta(before, after Counts) Counts {
	if Reset(before, after) {
		return after.clone()
	}
	d := Counts{
		Success: after.Success - before.Success,
		Failure: after.Failure - before.Failure,
		TLS:     after.TLS - before.TLS,
		Buckets: map[float64]float64{},
	}
	for le, v := range after.Buckets {
		d.Buckets[le] = v - before.Buckets[le]
	}
	return d
}

// Reset reports whether a counter went down from before to after: the
// proxy restarted between the scrapes.
func Reset(before, after Counts) bool {
	reset := after.Success < before.Success || after.Failure < before.Failure || after.TLS < before.TLS
	for le, v := range after.Buckets {
		if v < before.Buckets[le] {
			reset = true
		}
	}
	return reset
}

func (c Counts) clone() Counts {
	out := c
	out.Buckets = make(map[float64]float64, len(c.Buckets))
	for le, v := range c.Buckets {
		out.Buckets[le] = v
	}
	return out
}

// Add returns the sum of a and b (several pods' deltas).
func Add(a, b Counts) Counts {
	s := Counts{Success: a.Success + b.Success, Failure: a.Failure + b.Failure, TLS: a.TLS + b.TLS, Buckets: map[float64]float64{}}
	for le, v := range a.Buckets {
		s.Buckets[le] += v
	}
	for le, v := range b.Buckets {
		s.Buckets[le] += v
	}
	return s
}

// Stats are the figures of one row. Pointers are nil when there was no
// traffic in the window.
type Stats struct {
	Requests    float64  `json:"requests"`
	SuccessRate *float64 `json:"successRate"` // 0..1
	RPS         *float64 `json:"rps"`
	LatencyP50  *float64 `json:"latencyP50Ms"`
	LatencyP95  *float64 `json:"latencyP95Ms"`
	LatencyP99  *float64 `json:"latencyP99Ms"`
	TLSShare    *float64 `json:"tlsShare"` // 0..1
}

// Compute derives Stats from a delta measured over window.
func Compute(d Counts, window time.Duration) Stats {
	s := Stats{Requests: d.Total()}
	if d.Total() <= 0 || window <= 0 {
		return s
	}
	s.SuccessRate = ptr(d.Success / d.Total())
	s.RPS = ptr(d.Total() / window.Seconds())
	s.TLSShare = ptr(d.TLS / d.Total())
	s.LatencyP50 = Quantile(0.50, d.Buckets)
	s.LatencyP95 = Quantile(0.95, d.Buckets)
	s.LatencyP99 = Quantile(0.99, d.Buckets)
	return s
}

func ptr(f float64) *float64 { return &f }

// Quantile estimates the q-quantile from cumulative bucket counts like
// Prometheus's histogram_quantile: linear interpolation inside the bucket
// holding the rank, the first bucket starting at 0, and the upper bound
// of the highest finite bucket when the rank falls into +Inf. It is nil
// without observations.
func Quantile(q float64, buckets map[float64]float64) *float64 {
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	sort.Float64s(les)
	if len(les) == 0 || !math.IsInf(les[len(les)-1], 1) {
		return nil
	}
	total := buckets[les[len(les)-1]]
	if total <= 0 {
		return nil
	}
	rank := q * total
	lower, below := 0.0, 0.0
	for i, le := range les {
		count := buckets[le]
		if count < rank {
			lower, below = le, count
			continue
		}
		if math.IsInf(le, 1) {
			if i == 0 {
				return nil
			}
			return ptr(les[i-1])
		}
		if count == below {
			return ptr(le)
		}
		return ptr(lower + (le-lower)*(rank-below)/(count-below))
	}
	return ptr(les[len(les)-2])
}
