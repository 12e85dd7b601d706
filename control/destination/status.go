package destination

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gateway "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/plexus-mesh/plexus/control/outboundpolicy"
)

// statusWriter keeps the status of HTTPRoutes and GRPCRoutes whose parent
// is a Service: the entries of controller plexus.dev/policy-controller,
// computed by control/outboundpolicy, written when they change. It runs apart
// from the policy loop so that slow API writes never delay proxies.
type statusWriter struct {
	client gateway.Interface
	p      *policies
	log    *slog.Logger
	kickc  chan struct{}
}

func newStatusWriter(c gateway.Interface, p *policies) *statusWriter {
	return &statusWriter{client: c, p: p, log: p.log, kickc: make(chan struct{}, 1)}
}

func (w *statusWriter) kick() {
	select {
	case w.kickc <- struct{}{}:
	default:
	}
}

// run writes status while this replica holds the status Lease
// (Config.StatusLease), until ctx ends: one replica writes, the others
// stand by.
func (w *statusWriter) run(ctx context.Context) {
	leader := w.p.metrics.statusLeader
	w.p.cfg.StatusLease.whileLeading(ctx, w.p.kube, w.log, func(on bool) {
		if on {
			leader.Set(1)
		} else {
			leader.Set(0)
		}
	}, w.write)
}

// write writes status now, after each kick, and every minute (to repair
// writes that failed) until ctx ends.
func (w *statusWriter) write(ctx context.Context) {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	for {
		w.sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-w.kickc:
		case <-tick.C:
		}
	}
}

func (w *statusWriter) sync(ctx context.Context) {
	lookup := func(ns, name string) (*corev1.Service, bool) {
		svc, err := w.p.w.svcList.Services(ns).Get(name)
		return svc, err == nil
	}
	for _, r := range listTyped[*gatewayv1.HTTPRoute](w.p.httpRoutes) {
		parents := outboundpolicy.HTTPRouteParents(r, lookup, metav1.Now())
		merged, changed := outboundpolicy.MergeParents(r.Status.Parents, parents)
		if !changed {
			continue
		}
		c := r.DeepCopy() // never mutate the cache
		c.Status.Parents = merged
		_, err := w.client.GatewayV1().HTTPRoutes(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
		w.written(ctx, "HTTPRoute", c.Namespace+"/"+c.Name, err)
	}
	for _, r := range listTyped[*gatewayv1.GRPCRoute](w.p.grpcRoutes) {
		parents := outboundpolicy.GRPCRouteParents(r, lookup, metav1.Now())
		merged, changed := outboundpolicy.MergeParents(r.Status.Parents, parents)
		if !changed {
			continue
		}
		c := r.DeepCopy()
		c.Status.Parents = merged
		_, err := w.client.GatewayV1().GRPCRoutes(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
		w.written(ctx, "GRPCRoute", c.Namespace+"/"+c.Name, err)
	}
}

// written counts a status update and logs one that failed.
func (w *statusWriter) written(ctx context.Context, kind, route string, err error) {
	if err == nil {
		w.p.metrics.statusWrites.WithLabelValues("ok").Inc()
		return
	}
	w.p.metrics.statusWrites.WithLabelValues("error").Inc()
	if ctx.Err() == nil {
		w.log.Warn("writing "+kind+" status failed; retrying later", "route", route, "err", err)
	}
}
