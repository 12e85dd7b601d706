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

func newStatusWriter(c gateway.Interface, p *policies, log *slog.Logger) *statusWriter {
	return &statusWriter{client: c, p: p, log: log, kickc: make(chan struct{}, 1)}
}

func (w *statusWriter) kick() {
	select {
	case w.kickc <- struct{}{}:
	default:
	}
}

// run writes status after each kick (and every minute, to repair writes
// that failed) until ctx ends. Only one replica should write; with one
// destination replica that holds (leader election is not done yet).
func (w *statusWriter) run(ctx context.Context) {
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
		if _, err := w.client.GatewayV1().HTTPRoutes(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
			w.log.Warn("writing HTTPRoute status failed; retrying later", "route", c.Namespace+"/"+c.Name, "err", err)
		}
	}
	for _, r := range listTyped[*gatewayv1.GRPCRoute](w.p.grpcRoutes) {
		parents := outboundpolicy.GRPCRouteParents(r, lookup, metav1.Now())
		merged, changed := outboundpolicy.MergeParents(r.Status.Parents, parents)
		if !changed {
			continue
		}
		c := r.DeepCopy()
		c.Status.Parents = merged
		if _, err := w.client.GatewayV1().GRPCRoutes(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil && ctx.Err() == nil {
			w.log.Warn("writing GRPCRoute status failed; retrying later", "route", c.Namespace+"/"+c.Name, "err", err)
		}
	}
}
