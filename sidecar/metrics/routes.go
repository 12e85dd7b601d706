package metrics

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The outbound route metrics (ARCHITECTURE.md §8), Linkerd 2.16's names and
// labels: outbound_http_route_* and outbound_grpc_route_*. Their label
// values come from the routes the control plane sent (a bounded set) and
// from status codes (bounded by statusLabel and grpcLabel).

// Ref names a parent, route or backend for the parent_*, route_* and
// backend_* labels.
type Ref struct {
	Group, Kind, Namespace, Name, Port, Section string
}

func (r Ref) values() []string {
	return []string{r.Group, r.Kind, r.Namespace, r.Name, r.Port, r.Section}
}

// Values of the error label of the route status metrics (Linkerd's).
const (
	RouteErrRequestTimeout  = "REQUEST_TIMEOUT"
	RouteErrResponseTimeout = "RESPONSE_TIMEOUT"
	RouteErrIdleTimeout     = "IDLE_TIMEOUT"
	RouteErrCancel          = "CANCEL"
	RouteErrFailFast        = "FAILFAST"
	RouteErrLoadShed        = "LOADSHED"
	RouteErrUnexpected      = "UNEXPECTED"
)

func labelNames(prefix string) []string {
	return []string{prefix + "_group", prefix + "_kind", prefix + "_namespace", prefix + "_name", prefix + "_port", prefix + "_section_name"}
}

// routeBucketsSeconds bound request durations fine enough for the
// p50/p95/p99 of plexusctl routes.
var routeBucketsSeconds = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// routeFamilies is one protocol's set of route metric families.
type routeFamilies struct {
	duration        *prometheus.HistogramVec
	statuses        *prometheus.CounterVec
	backendRequests *prometheus.CounterVec
	backendDuration *prometheus.HistogramVec
	backendStatuses *prometheus.CounterVec
	retryRequests   *prometheus.CounterVec
	retrySuccesses  *prometheus.CounterVec
	retryLimit      *prometheus.CounterVec
	retryOverflow   *prometheus.CounterVec
}

func newRouteFamilies(proto, statusLabel string) *routeFamilies {
	route := append(labelNames("parent"), labelNames("route")...)
	backend := append(append([]string{}, route...), labelNames("backend")...)
	status := []string{statusLabel, "error"}
	name := func(s string) string { return "outbound_" + proto + "_route_" + s }
	counter := func(n, help string, labels []string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name(n), Help: help}, labels)
	}
	hist := func(n, help string, labels []string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name(n), Help: help, Buckets: routeBucketsSeconds}, labels)
	}
	return &routeFamilies{
		duration:        hist("request_duration_seconds", "Time from a route's request to the end of its response, all attempts included.", route),
		statuses:        counter("request_statuses_total", "Responses of a route's requests, by status and proxy error.", append(append([]string{}, route...), status...)),
		backendRequests: counter("backend_requests_total", "Attempts sent to a route's backend, retries included.", backend),
		backendDuration: hist("backend_response_duration_seconds", "Time from an attempt to the end of its response.", backend),
		backendStatuses: counter("backend_response_statuses_total", "Responses of a route's backend, by status and proxy error.", append(append([]string{}, backend...), status...)),
		retryRequests:   counter("retry_requests_total", "Retries sent.", route),
		retrySuccesses:  counter("retry_successes_total", "Requests that succeeded on a retry.", route),
		retryLimit:      counter("retry_limit_exceeded_total", "Requests that stayed failed because the retry limit was reached.", route),
		retryOverflow:   counter("retry_overflow_total", "Retries not sent because the retry budget was spent, or the request body was too large to hold for replay.", route),
	}
}

func (f *routeFamilies) collectors() []prometheus.Collector {
	return []prometheus.Collector{f.duration, f.statuses, f.backendRequests, f.backendDuration, f.backendStatuses,
		f.retryRequests, f.retrySuccesses, f.retryLimit, f.retryOverflow}
}

// RouteSeries holds the series of one route of one parent, resolved once
// when the route arrives so that a request costs no label lookups.
type RouteSeries struct {
	key                                            string // in Metrics.routesHeld
	f                                              *routeFamilies
	labels                                         []string
	grpc                                           bool
	duration                                       prometheus.Observer
	retries, retrySuccesses, retryLimit, overflows prometheus.Counter
	statuses                                       statusCache
}

// Route returns the series of route under parent (gRPC: the
// outbound_grpc_route_* families). Each call holds the series until a
// ReleaseRoute: series no route holds any more are deleted, so routes
// that come and go do not grow the metrics.
func (m *Metrics) Route(grpc bool, parent, route Ref) *RouteSeries {
	labels := append(parent.values(), route.values()...)
	key := strings.Join(labels, "\x00")
	if grpc {
		key = "grpc\x00" + key
	}
	m.routesMu.Lock()
	defer m.routesMu.Unlock()
	if h := m.routesHeld[key]; h != nil {
		h.n++
		return h.s
	}
	s := m.newRouteSeries(grpc, labels)
	s.key = key
	m.routesHeld[key] = &heldRoute{s: s, n: 1}
	return s
}

// ReleaseRoute gives back one hold of s; the last one deletes its series,
// its backends' and its statuses'.
func (m *Metrics) ReleaseRoute(s *RouteSeries) {
	m.routesMu.Lock()
	defer m.routesMu.Unlock()
	h := m.routesHeld[s.key]
	if h == nil || h.s != s {
		return
	}
	if h.n--; h.n > 0 {
		return
	}
	delete(m.routesHeld, s.key)
	f := s.f
	for _, v := range []*prometheus.CounterVec{f.retryRequests, f.retrySuccesses, f.retryLimit, f.retryOverflow} {
		v.DeleteLabelValues(s.labels...)
	}
	f.duration.DeleteLabelValues(s.labels...)
	match := prometheus.Labels{}
	for i, name := range append(labelNames("parent"), labelNames("route")...) {
		match[name] = s.labels[i]
	}
	f.statuses.DeletePartialMatch(match)
	f.backendRequests.DeletePartialMatch(match)
	f.backendDuration.DeletePartialMatch(match)
	f.backendStatuses.DeletePartialMatch(match)
}

// heldRoute counts the holds on one route's series.
type heldRoute struct {
	s *RouteSeries
	n int
}

func (m *Metrics) newRouteSeries(grpc bool, labels []string) *RouteSeries {
	f := m.httpRoutes
	if grpc {
		f = m.grpcRoutes
	}
	return &RouteSeries{
		f: f, labels: labels, grpc: grpc,
		duration:       f.duration.WithLabelValues(labels...),
		retries:        f.retryRequests.WithLabelValues(labels...),
		retrySuccesses: f.retrySuccesses.WithLabelValues(labels...),
		retryLimit:     f.retryLimit.WithLabelValues(labels...),
		overflows:      f.retryOverflow.WithLabelValues(labels...),
		statuses:       statusCache{vec: f.statuses, labels: labels, grpc: grpc},
	}
}

// Retry counts a retry sent; RetrySucceeded a request whose retry
// succeeded; RetryLimitExceeded one that failed with no retry left;
// RetryOverflow a retry the budget (or an unheld body) did not allow.
func (s *RouteSeries) Retry()              { s.retries.Inc() }
func (s *RouteSeries) RetrySucceeded()     { s.retrySuccesses.Inc() }
func (s *RouteSeries) RetryLimitExceeded() { s.retryLimit.Inc() }
func (s *RouteSeries) RetryOverflow()      { s.overflows.Inc() }

// Done records a route request that took d: its final status (0 when
// there was none), gRPC status ("" for none) and error label.
func (s *RouteSeries) Done(d time.Duration, status int, grpcStatus, errLabel string) {
	s.duration.Observe(d.Seconds())
	s.statuses.get(status, grpcStatus, errLabel).Inc()
}

// BackendSeries holds the series of one backend of one route.
type BackendSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
	statuses statusCache
}

// Backend returns the series of backend under s's route.
func (s *RouteSeries) Backend(backend Ref) *BackendSeries {
	labels := append(append([]string{}, s.labels...), backend.values()...)
	return &BackendSeries{
		requests: s.f.backendRequests.WithLabelValues(labels...),
		duration: s.f.backendDuration.WithLabelValues(labels...),
		statuses: statusCache{vec: s.f.backendStatuses, labels: labels, grpc: s.grpc},
	}
}

// Sent counts an attempt sent to the backend.
func (b *BackendSeries) Sent() { b.requests.Inc() }

// Done records an attempt's response, as RouteSeries.Done.
func (b *BackendSeries) Done(d time.Duration, status int, grpcStatus, errLabel string) {
	b.duration.Observe(d.Seconds())
	b.statuses.get(status, grpcStatus, errLabel).Inc()
}

// statusCache resolves status series once per distinct (status, error).
type statusCache struct {
	vec    *prometheus.CounterVec
	labels []string
	grpc   bool
	m      sync.Map // statusKey → prometheus.Counter
}

type statusKey struct {
	status int
	grpc   string
	err    string
}

func (c *statusCache) get(status int, grpcStatus, errLabel string) prometheus.Counter {
	k := statusKey{status, grpcStatus, errLabel}
	if v, ok := c.m.Load(k); ok {
		return v.(prometheus.Counter)
	}
	s := ""
	switch {
	case c.grpc:
		s = grpcLabel(grpcStatus)
	case status != 0:
		s = statusLabel(status)
	}
	v, _ := c.m.LoadOrStore(k, c.vec.WithLabelValues(append(append([]string{}, c.labels...), s, errLabel)...))
	return v.(prometheus.Counter)
}

// PortLabel is a port as a label value ("" for none).
func PortLabel(p uint32) string {
	if p == 0 {
		return ""
	}
	return strconv.FormatUint(uint64(p), 10)
}
