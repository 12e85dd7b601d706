package vizquery

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/model"
)

// Every PromQL string this package sends is built in this file, from
// label matchers whose values are quoted here (strconv.Quote: PromQL
// string literals take Go's escapes), so no caller's value can change a
// query's shape.

// Names of the scrape job, the proxy's metrics and their labels
// (sidecar/metrics; deploy/plexus-viz/prometheus-config.yaml).
const (
	ProxyJob = "plexus-proxy"

	metricResponses   = "response_total"
	metricLatencyBkt  = "response_latency_ms_bucket"
	metricTCPOpen     = "tcp_open_total"
	metricTCPOpenConn = "tcp_open_connections"

	labelNamespace    = "namespace"
	labelPod          = "pod"
	labelWorkloadKind = "workload_kind"
	labelWorkloadName = "workload_name"
	labelClientID     = "client_id"
	labelServerID     = "server_id"
	labelTLS          = "tls"
	labelClass        = "classification"
	labelLE           = "le"
	// labelCounter tags the parts of one combined query (label_replace).
	labelCounter = "plexus_counter"
)

// matcher is one label matcher.
type matcher struct{ name, op, value string }

func eq(name, value string) matcher { return matcher{name, "=", value} }
func re(name, value string) matcher { return matcher{name, "=~", value} }

// selector renders matchers as {a="x",b=~"y"}, each value quoted.
func selector(ms []matcher) string {
	parts := make([]string, len(ms))
	for i, m := range ms {
		parts[i] = m.name + m.op + strconv.Quote(m.value)
	}
	return "{" + strings.Join(parts, ",") + "}"
}

// matchers selects the proxy job and f's non-empty fields.
func (f Filter) matchers(extra ...matcher) []matcher {
	ms := []matcher{eq("job", ProxyJob)}
	for _, m := range []matcher{eq(labelNamespace, f.Namespace), eq(labelWorkloadKind, f.WorkloadKind), eq(labelWorkloadName, f.WorkloadName), eq(labelPod, f.Pod)} {
		if m.value != "" {
			ms = append(ms, m)
		}
	}
	return append(ms, extra...)
}

// inbound selects f's inbound series, as plexusctl stat reads them.
func (f Filter) inbound(extra ...matcher) []matcher {
	return f.matchers(append([]matcher{eq("direction", "inbound")}, extra...)...)
}

// dur renders a range in PromQL's units (1m, 30s).
func dur(d time.Duration) string { return model.Duration(d).String() }

func by(labels ...string) string { return "(" + strings.Join(labels, ", ") + ")" }

// tag names one part of a combined query with labelCounter.
func tag(q, name string) string {
	return fmt.Sprintf("label_replace(%s, %s, %s, \"\", \"\")", q, strconv.Quote(labelCounter), strconv.Quote(name))
}

// Golden metrics (golden.go).

func qGoldenCounts(group []string, f Filter, w time.Duration) string {
	return fmt.Sprintf("sum by %s (rate(%s%s[%s]))", by(append(group, labelClass, labelTLS, labelClientID)...), metricResponses, selector(f.inbound()), dur(w))
}

func qGoldenQuantile(q float64, group []string, f Filter, w time.Duration) string {
	return fmt.Sprintf("histogram_quantile(%s, sum by %s (rate(%s%s[%s])))", strconv.FormatFloat(q, 'g', -1, 64), by(append(group, labelLE)...), metricLatencyBkt, selector(f.inbound()), dur(w))
}

// qTargets counts (agg "count") or counts the healthy (agg "sum") proxy
// scrape targets.
func qTargets(agg string, group []string, f Filter) string {
	return fmt.Sprintf("%s by %s (up%s)", agg, by(group...), selector(f.matchers()))
}

// Sparklines (golden.go): one series per row of the level.

func qSparkRPS(group []string, f Filter, w time.Duration) string {
	return fmt.Sprintf("sum by %s (rate(%s%s[%s]))", by(group...), metricResponses, selector(f.inbound()), dur(w))
}

// qSparkSuccess is 0 (not absent) when every response failed, and NaN
// (no point) when there was no response.
func qSparkSuccess(group []string, f Filter, w time.Duration) string {
	all := qSparkRPS(group, f, w)
	return fmt.Sprintf("(sum by %s (rate(%s%s[%s])) or 0 * %s) / %s",
		by(group...), metricResponses, selector(f.inbound(eq(labelClass, "success"))), dur(w), all, all)
}

func qSparkP99(group []string, f Filter, w time.Duration) string {
	return fmt.Sprintf("histogram_quantile(0.99, sum by %s (rate(%s%s[%s])))", by(append(group, labelLE)...), metricLatencyBkt, selector(f.inbound()), dur(w))
}

// Edges (edges.go): inbound series whose server is in ns, or whose
// client's identity is in ns; only those with traffic in the window (or,
// for connections, open now).

var edgeLabels = []string{labelNamespace, labelWorkloadKind, labelWorkloadName, labelClientID, labelServerID, labelTLS}

// clientInNamespace matches a client_id of namespace ns.
func clientInNamespace(ns string) matcher {
	return re(labelClientID, "spiffe://[^/]+/ns/"+regexp.QuoteMeta(ns)+"/sa/.+")
}

func qEdges(metric string, ns string, w time.Duration, extra ...matcher) string {
	side := func(m matcher) string {
		f := Filter{}
		return fmt.Sprintf("sum by %s (rate(%s%s[%s])) > 0", by(edgeLabels...), metric, selector(f.inbound(append([]matcher{m}, extra...)...)), dur(w))
	}
	return side(eq(labelNamespace, ns)) + " or " + side(clientInNamespace(ns))
}

func qEdgesHTTP(ns string, w time.Duration) string { return qEdges(metricResponses, ns, w) }

func qEdgesTCP(ns string, w time.Duration) string {
	return qEdges(metricTCPOpen, ns, w, eq("peer", "src"))
}

func qEdgesOpen(ns string) string {
	side := func(m matcher) string {
		return fmt.Sprintf("sum by %s (%s%s) > 0", by(edgeLabels...), metricTCPOpenConn, selector(Filter{}.inbound(m, eq("peer", "src"))))
	}
	return side(eq(labelNamespace, ns)) + " or " + side(clientInNamespace(ns))
}

// Routes (routes.go): one query per protocol, its parts tagged.

var routeLabels = []string{
	"parent_group", "parent_kind", "parent_namespace", "parent_name", "parent_port", "parent_section_name",
	"route_group", "route_kind", "route_namespace", "route_name", "route_port", "route_section_name",
}

// Parts of a route query (the labelCounter values).
const (
	partRequests = "requests" // by route and error
	partSuccess  = "success"
	partBucket   = "bucket" // by route and le, seconds
	partBackend  = "backend_requests"
	partRetries  = "retries"
	partRetryOK  = "retry_successes"
	partRetryMax = "retry_limit_exceeded"
	partOverflow = "retry_overflow"
)

// routeSuccess selects the statuses plexusctl routes counts as success:
// no proxy error, and HTTP status 1xx-4xx or gRPC status 0.
func routeSuccess(proto string) []matcher {
	if proto == "grpc" {
		return []matcher{eq("error", ""), eq("grpc_status", "0")}
	}
	return []matcher{eq("error", ""), re("http_status", "[1-4][0-9][0-9]")}
}

func qRoutes(proto string, f Filter, w time.Duration) string {
	name := func(s string) string { return "outbound_" + proto + "_route_" + s }
	inc := func(metric string, ms []matcher, extra ...string) string {
		return fmt.Sprintf("sum by %s (increase(%s%s[%s]))", by(append(append([]string{}, routeLabels...), extra...)...), metric, selector(ms), dur(w))
	}
	parts := []string{
		tag(inc(name("request_statuses_total"), f.matchers(), "error"), partRequests),
		tag(inc(name("request_statuses_total"), f.matchers(routeSuccess(proto)...)), partSuccess),
		tag(inc(name("request_duration_seconds_bucket"), f.matchers(), labelLE), partBucket),
	}
	for _, p := range []struct{ metric, part string }{
		{"backend_requests_total", partBackend},
		{"retry_requests_total", partRetries},
		{"retry_successes_total", partRetryOK},
		{"retry_limit_exceeded_total", partRetryMax},
		{"retry_overflow_total", partOverflow},
	} {
		parts = append(parts, tag(inc(name(p.metric), f.matchers()), p.part))
	}
	return strings.Join(parts, " or ")
}

// Health (vizquery.go).

func qProxyTargets(agg string) string {
	return fmt.Sprintf("%s(up%s)", agg, selector([]matcher{eq("job", ProxyJob)}))
}
