// Package routestats is the arithmetic of per-route traffic: the
// outbound_http_route_* and outbound_grpc_route_* counters of a proxy
// (ARCHITECTURE.md §8) parsed, subtracted, summed and turned into rows.
// plexusctl routes reads them from scrapes, the viz extension from
// Prometheus.
package routestats

import (
	"strconv"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/plexus-mesh/plexus/control/meshstats"
)

// Protocols, as in the metric names outbound_<protocol>_route_*.
const (
	HTTP = "http"
	GRPC = "grpc"
)

// Ref is a parent or route as its metric labels name it (<prefix>_group,
// _kind, _namespace, _name, _port, _section_name).
type Ref struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	Port      string `json:"port,omitempty"`
	Section   string `json:"sectionName,omitempty"`
}

func ref(l map[string]string, prefix string) Ref {
	return Ref{
		Group: l[prefix+"_group"], Kind: l[prefix+"_kind"], Namespace: l[prefix+"_namespace"],
		Name: l[prefix+"_name"], Port: l[prefix+"_port"], Section: l[prefix+"_section_name"],
	}
}

// Key is one route of one parent (a Service and port).
type Key struct {
	Protocol string `json:"protocol"`
	Parent   Ref    `json:"parent"`
	Route    Ref    `json:"route"`
}

// Counts are one route's counters in one scrape (or a delta of two, or a
// sum over pods).
type Counts struct {
	// Requests are the route's requests as the client sent them: success
	// and failure by final status, and their latency in ms (Buckets).
	Requests meshstats.Counts
	// Timeouts are requests that ended in a proxy timeout (an error label
	// containing TIMEOUT).
	Timeouts float64
	// BackendRequests are the attempts sent, retries included.
	BackendRequests float64
	// Retries sent; requests that succeeded on one; that failed with
	// none left; retries the budget refused.
	Retries, RetrySuccesses, RetryLimitExceeded, RetryOverflow float64
}

// counters are the counters beside Requests, for arithmetic.
func (c *Counts) counters() []*float64 {
	return []*float64{&c.Timeouts, &c.BackendRequests, &c.Retries, &c.RetrySuccesses, &c.RetryLimitExceeded, &c.RetryOverflow}
}

// Parse reads every route's counters from one scrape of a proxy.
func Parse(text []byte) (map[Key]*Counts, error) {
	fams, err := meshstats.ParseText(text)
	if err != nil {
		return nil, err
	}
	out := map[Key]*Counts{}
	get := func(proto string, m *dto.Metric) (*Counts, map[string]string) {
		l := meshstats.Labels(m)
		k := Key{Protocol: proto, Parent: ref(l, "parent"), Route: ref(l, "route")}
		c := out[k]
		if c == nil {
			c = &Counts{Requests: meshstats.Counts{Buckets: map[float64]float64{}}}
			out[k] = c
		}
		return c, l
	}
	for _, proto := range []string{HTTP, GRPC} {
		name := func(s string) string { return "outbound_" + proto + "_route_" + s }
		for _, m := range fams[name("request_statuses_total")].GetMetric() {
			c, l := get(proto, m)
			v := m.GetCounter().GetValue()
			if success(proto, l) {
				c.Requests.Success += v
			} else {
				c.Requests.Failure += v
			}
			if strings.Contains(l["error"], "TIMEOUT") {
				c.Timeouts += v
			}
		}
		for _, m := range fams[name("request_duration_seconds")].GetMetric() {
			c, _ := get(proto, m)
			meshstats.AddHistogram(c.Requests.Buckets, m.GetHistogram(), 1000)
		}
		for metric, field := range map[string]func(*Counts) *float64{
			"backend_requests_total":     func(c *Counts) *float64 { return &c.BackendRequests },
			"retry_requests_total":       func(c *Counts) *float64 { return &c.Retries },
			"retry_successes_total":      func(c *Counts) *float64 { return &c.RetrySuccesses },
			"retry_limit_exceeded_total": func(c *Counts) *float64 { return &c.RetryLimitExceeded },
			"retry_overflow_total":       func(c *Counts) *float64 { return &c.RetryOverflow },
		} {
			// Backend series add backend_* labels: summed per route.
			for _, m := range fams[name(metric)].GetMetric() {
				c, _ := get(proto, m)
				*field(c) += m.GetCounter().GetValue()
			}
		}
	}
	return out, nil
}

// success classifies one status series: no proxy error, and an HTTP
// status below 500, or gRPC status 0 (OK). The proxy writes grpc_status
// as the code's number (sidecar/metrics), never its name.
func success(proto string, l map[string]string) bool {
	if l["error"] != "" {
		return false
	}
	if proto == GRPC {
		return l["grpc_status"] == "0"
	}
	code, err := strconv.Atoi(l["http_status"])
	return err == nil && code >= 100 && code < 500
}

// Delta is after minus before per route. A route whose counters went
// down was reset (the proxy restarted): after alone is its delta, as
// Prometheus's increase() would count it.
func Delta(before, after map[Key]*Counts) map[Key]*Counts {
	out := make(map[Key]*Counts, len(after))
	for k, a := range after {
		b := before[k]
		if b == nil {
			b = &Counts{}
		}
		d := &Counts{}
		reset := meshstats.Reset(b.Requests, a.Requests)
		bc, ac, dc := b.counters(), a.counters(), d.counters()
		for i := range ac {
			reset = reset || *ac[i] < *bc[i]
		}
		if reset {
			b = &Counts{}
		}
		d.Requests = meshstats.Delta(b.Requests, a.Requests)
		bc = b.counters()
		for i := range ac {
			*dc[i] = *ac[i] - *bc[i]
		}
		out[k] = d
	}
	return out
}

// Add adds d into sum, route by route.
func Add(sum, d map[Key]*Counts) {
	for k, c := range d {
		s := sum[k]
		if s == nil {
			s = &Counts{}
			sum[k] = s
		}
		s.Requests = meshstats.Add(s.Requests, c.Requests)
		sc, cc := s.counters(), c.counters()
		for i := range cc {
			*sc[i] += *cc[i]
		}
	}
}
