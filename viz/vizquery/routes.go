package vizquery

import (
	"context"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"

	"github.com/plexus-mesh/plexus/control/meshstats"
	"github.com/plexus-mesh/plexus/control/routestats"
)

// Routes returns the per-route traffic the proxies f selects sent in the
// last window (outbound_http_route_* and outbound_grpc_route_*), as
// plexusctl routes computes its rows: one per route and parent Service,
// sorted by parent then route.
func (c *Client) Routes(ctx context.Context, f Filter, window time.Duration) ([]routestats.Row, error) {
	protos := []string{routestats.HTTP, routestats.GRPC}
	qs := make([]string, len(protos))
	for i, p := range protos {
		qs[i] = qRoutes(p, f, window)
	}
	vs, err := c.vectors(ctx, qs...)
	if err != nil {
		return nil, err
	}
	counts := map[routestats.Key]*routestats.Counts{}
	for i, proto := range protos {
		for _, s := range vs[i] {
			m := s.Metric
			k := routestats.Key{Protocol: proto, Parent: ref(m, "parent"), Route: ref(m, "route")}
			c := counts[k]
			if c == nil {
				c = &routestats.Counts{Requests: meshstats.Counts{Buckets: map[float64]float64{}}}
				counts[k] = c
			}
			addRoutePart(c, m, value(s.Value))
		}
	}
	rows := make([]routestats.Row, 0, len(counts))
	for k, c := range counts {
		c.Requests.Failure -= c.Requests.Success // requests counted all of them
		if c.Requests.Failure < 0 {
			c.Requests.Failure = 0
		}
		rows = append(rows, routestats.Compute(k, c, window))
	}
	sort.Slice(rows, func(i, j int) bool { return routeOrder(rows[i].Key) < routeOrder(rows[j].Key) })
	return rows, nil
}

// addRoutePart adds one tagged series of a route query to c.
func addRoutePart(c *routestats.Counts, m model.Metric, v float64) {
	switch string(m[labelCounter]) {
	case partRequests:
		c.Requests.Failure += v
		if strings.Contains(string(m["error"]), "TIMEOUT") {
			c.Timeouts += v
		}
	case partSuccess:
		c.Requests.Success += v
	case partBucket:
		le, err := strconv.ParseFloat(string(m[labelLE]), 64)
		if err != nil {
			return
		}
		if !math.IsInf(le, 1) {
			le *= 1000 // seconds → ms, as plexusctl routes
		}
		c.Requests.Buckets[le] += v
	case partBackend:
		c.BackendRequests += v
	case partRetries:
		c.Retries += v
	case partRetryOK:
		c.RetrySuccesses += v
	case partRetryMax:
		c.RetryLimitExceeded += v
	case partOverflow:
		c.RetryOverflow += v
	}
}

// ref reads a parent or route from its <prefix>_* labels.
func ref(m model.Metric, prefix string) routestats.Ref {
	l := func(s string) string { return string(m[model.LabelName(prefix+"_"+s)]) }
	return routestats.Ref{Group: l("group"), Kind: l("kind"), Namespace: l("namespace"), Name: l("name"), Port: l("port"), Section: l("section_name")}
}

// routeOrder sorts by parent (namespace, name, port), then route.
func routeOrder(k routestats.Key) string {
	return strings.Join([]string{k.Parent.Namespace, k.Parent.Name, k.Parent.Port, k.Route.Namespace, k.Route.Kind, k.Route.Name, k.Protocol}, "\x00")
}
