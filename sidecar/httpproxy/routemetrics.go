package httpproxy

import (
	"context"
	"errors"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// The route stage's metrics: outbound_{http,grpc}_route_* series are
// resolved once per compiled table (InstrumentRoutes) and hung on its
// routes and backends, so a request costs no label lookups.

// InstrumentRoutes attaches metric series to every route and backend of
// t; call it before t serves requests.
func InstrumentRoutes(m *metrics.Metrics, t *routes.Table) {
	parent := metricRef(t.Parent)
	for _, r := range t.Routes {
		rs := m.Route(r.GRPC, parent, metricRef(r.Ref))
		r.Series = rs
		for _, rule := range r.Rules {
			for _, b := range rule.Backends {
				b.Series = rs.Backend(metricRef(b.Ref))
			}
		}
	}
}

// ReleaseRoutes gives back the series InstrumentRoutes took for t, once
// t serves no more new requests (replaced, or its destination dropped).
func ReleaseRoutes(m *metrics.Metrics, t *routes.Table) {
	for _, r := range t.Routes {
		if rs, ok := r.Series.(*metrics.RouteSeries); ok {
			m.ReleaseRoute(rs)
		}
	}
}

func metricRef(r *destinationpb.ResourceRef) metrics.Ref {
	return metrics.Ref{Group: r.GetGroup(), Kind: r.GetKind(), Namespace: r.GetNamespace(), Name: r.GetName(),
		Port: metrics.PortLabel(r.GetPort()), Section: r.GetSectionName()}
}

func routeSeries(rule *routes.Rule) *metrics.RouteSeries {
	s, _ := rule.Route.Series.(*metrics.RouteSeries)
	return s
}

func backendSeries(b *routes.Backend) *metrics.BackendSeries {
	if b == nil {
		return nil
	}
	s, _ := b.Series.(*metrics.BackendSeries)
	return s
}

// sent records an attempt sent to the chosen backend.
func (x *exchange) sent() {
	if b := backendSeries(x.backend); b != nil {
		b.Sent()
		x.attemptStart = x.start
		if x.attempts > 0 {
			x.attemptStart = time.Now()
		}
		x.attemptOpen = true
	}
}

// attemptDone records the end of an attempt that is not the last one:
// its response status, or err.
func (x *exchange) attemptDone(status int, grpcStatus string, err error) {
	if err != nil {
		x.judgeError(err)
	} else {
		x.judgeResponse(status, grpcStatus, "")
	}
	x.attemptEnd(time.Now(), status, grpcStatus, errLabel(err))
}

func (x *exchange) attemptEnd(now time.Time, status int, grpcStatus, errLabel string) {
	if b := backendSeries(x.backend); b != nil && x.attemptOpen {
		b.Done(now.Sub(x.attemptStart), status, grpcStatus, errLabel)
	}
	x.attemptOpen = false
}

// routeDone records the end of the route request and its last attempt.
func (x *exchange) routeDone(status int, grpcStatus, reason string) {
	if x.rule == nil {
		return
	}
	label := errLabelOf(reason)
	if x.reqCtx != nil && errors.Is(context.Cause(x.reqCtx), errRouteTimeout) && reason != "" {
		label = metrics.RouteErrRequestTimeout
	}
	now := time.Now()
	x.attemptEnd(now, status, grpcStatus, label)
	if rs := routeSeries(x.rule); rs != nil {
		rs.Done(now.Sub(x.start), status, grpcStatus, label)
	}
}

// errLabel is the route metrics' error label for an attempt's error.
func errLabel(err error) string {
	if err == nil {
		return ""
	}
	_, reason := classify(err)
	return errLabelOf(reason)
}

// errLabelOf maps the proxy's reasons to Linkerd's error label values.
func errLabelOf(reason string) string {
	switch reason {
	case "":
		return ""
	case ReasonRouteTimeout:
		return metrics.RouteErrRequestTimeout
	case ReasonAttemptTimeout, ReasonResponseTimeout, ReasonTimeout:
		return metrics.RouteErrResponseTimeout
	case ReasonIdleTimeout:
		return metrics.RouteErrIdleTimeout
	case ReasonClientGone, ReasonClientReset:
		return metrics.RouteErrCancel
	case ReasonNoEndpoints:
		return metrics.RouteErrFailFast
	case ReasonQueueFull:
		return metrics.RouteErrLoadShed
	}
	return metrics.RouteErrUnexpected
}

// attemptTimeout is how long one attempt of rule may take, and the cause
// it ends with: the shorter of its response timeout (never retried) and
// its retry policy's per-attempt timeout (retried, for idempotent
// requests).
func attemptTimeout(rule *routes.Rule) (time.Duration, error) {
	t, cause := rule.Timeouts.Response, error(errResponseTimeout)
	if rp := rule.Retry; rp != nil && rp.AttemptTimeout > 0 && (t == 0 || rp.AttemptTimeout < t) {
		t, cause = rp.AttemptTimeout, errAttemptTimeout
	}
	return t, cause
}
