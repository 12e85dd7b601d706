package destination

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"sort"
	"strings"
	"sync"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gateway "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"
	gatewayinformers "sigs.k8s.io/gateway-api/pkg/client/informers/externalversions"

	"github.com/plexus-mesh/plexus/control/outboundpolicy"
	"github.com/plexus-mesh/plexus/control/serviceprofile"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// Outbound policies (GetOutboundPolicy): the routes of one Service port as
// one client namespace sees them, from HTTPRoutes, GRPCRoutes and
// ServiceProfiles, translated by control/outboundpolicy. Any change to a route,
// profile or Service recomputes every open stream's policy and sends those
// that changed; handlers only signal the recompute loop, never block.

// RouteClients are the clients GetOutboundPolicy watches routes with.
type RouteClients struct {
	Gateway   gateway.Interface
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
}

// policies is the route side of the server.
type policies struct {
	cfg     Config
	log     *slog.Logger
	w       *watcher
	kube    kubernetes.Interface // the status Lease's
	metrics *metrics

	gwFactory  gatewayinformers.SharedInformerFactory
	dynFactory dynamicinformer.DynamicSharedInformerFactory
	httpRoutes cache.SharedIndexInformer // nil when the CRD is not installed
	grpcRoutes cache.SharedIndexInformer
	profiles   cache.SharedIndexInformer
	status     *statusWriter

	kick chan struct{}

	dirtyMu  sync.Mutex
	dirty    map[string]struct{} // "ns/name" of Services whose streams to recompute
	dirtyAll bool

	mu      sync.Mutex
	streams map[*policyStream]struct{}
	// warned logs translation warnings once: Translate runs per stream and
	// change, and repeats them.
	warned *onceLog
}

// warn logs a translation warning (a malformed Service annotation, an
// invalid profile) once.
func (p *policies) warn(err error) {
	p.warned.warn("outbound policy: ignored part of a resource", "problem", err.Error())
}

// policyStream is one GetOutboundPolicy stream.
type policyStream struct {
	svcNS, svcName string     // empty: not a Service (or ip is set)
	ip             netip.Addr // valid: the path is an IP, resolved on each recompute
	port           uint16
	clientNS       string
	clientNode     string // for the client's zone, looked up on each recompute
	tr             *translator[*pb.OutboundPolicy]
	last           *pb.OutboundPolicy
}

func newPolicies(cfg Config, w *watcher, kube kubernetes.Interface, m *metrics, log *slog.Logger) *policies {
	return &policies{cfg: cfg, w: w, kube: kube, metrics: m, log: log, kick: make(chan struct{}, 1),
		streams: map[*policyStream]struct{}{}, warned: newOnceLog(log), dirty: map[string]struct{}{}}
}

// watch sets up the route and profile informers for the kinds whose CRDs
// the API server serves; a missing CRD is logged and its kind ignored
// (restart destination after installing it).
func (p *policies) watch(c RouteClients) error {
	// A route or profile change recomputes the streams of the Services
	// it names (before and after the change), not every stream.
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { p.changed(p.affected(obj)...) },
		UpdateFunc: func(oldObj, newObj any) {
			if specChanged(oldObj, newObj) {
				p.changed(append(p.affected(oldObj), p.affected(newObj)...)...)
			}
		},
		DeleteFunc: func(obj any) { p.changed(p.affected(obj)...) },
	}
	p.gwFactory = gatewayinformers.NewSharedInformerFactory(c.Gateway, 0)
	add := func(inf cache.SharedIndexInformer, what string) (cache.SharedIndexInformer, error) {
		if _, err := inf.AddEventHandler(handler); err != nil {
			return nil, fmt.Errorf("adding %s handler: %w", what, err)
		}
		return inf, nil
	}
	httpServed, err := served(c.Discovery, "gateway.networking.k8s.io/v1", "httproutes")
	if err != nil {
		return err
	}
	grpcServed, err := served(c.Discovery, "gateway.networking.k8s.io/v1", "grpcroutes")
	if err != nil {
		return err
	}
	profilesServed, err := served(c.Discovery, serviceprofile.GroupVersionResource.GroupVersion().String(), serviceprofile.GroupVersionResource.Resource)
	if err != nil {
		return err
	}
	if httpServed {
		if p.httpRoutes, err = add(p.gwFactory.Gateway().V1().HTTPRoutes().Informer(), "HTTPRoute"); err != nil {
			return err
		}
	} else {
		p.log.Warn("the Gateway API HTTPRoute CRD is not installed: HTTPRoutes are ignored (plexusctl install --crds)")
	}
	if grpcServed {
		if p.grpcRoutes, err = add(p.gwFactory.Gateway().V1().GRPCRoutes().Informer(), "GRPCRoute"); err != nil {
			return err
		}
	} else {
		p.log.Warn("the Gateway API GRPCRoute CRD is not installed: GRPCRoutes are ignored (plexusctl install --crds)")
	}
	p.dynFactory = dynamicinformer.NewDynamicSharedInformerFactory(c.Dynamic, 0)
	if profilesServed {
		if p.profiles, err = add(p.dynFactory.ForResource(serviceprofile.GroupVersionResource).Informer(), "ServiceProfile"); err != nil {
			return err
		}
	} else {
		p.log.Warn("the ServiceProfile CRD is not installed: ServiceProfiles are ignored (plexusctl install --crds)")
	}
	p.status = newStatusWriter(c.Gateway, p)
	return nil
}

// served reports whether the API server serves resource in gv. Only
// "not found" means it does not; any other error (API server unreachable)
// fails, rather than ignoring the kind until the next restart.
func served(disc discovery.DiscoveryInterface, gv, resource string) (bool, error) {
	list, err := disc.ServerResourcesForGroupVersion(gv)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("discovering whether %s %s is served: %w", gv, resource, err)
	}
	for _, r := range list.APIResources {
		if r.Name == resource {
			return true, nil
		}
	}
	return false, nil
}

// start starts the informers and waits for their caches.
func (p *policies) start(ctx context.Context) error {
	if p.gwFactory == nil {
		return nil
	}
	p.gwFactory.Start(ctx.Done())
	p.dynFactory.Start(ctx.Done())
	for typ, ok := range p.gwFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer cache for %v did not sync: %w", typ, context.Cause(ctx))
		}
	}
	for gvr, ok := range p.dynFactory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer cache for %v did not sync: %w", gvr, context.Cause(ctx))
		}
	}
	return nil
}

// run recomputes the open streams' policies after each change, and keeps
// route status up to date, until ctx ends.
func (p *policies) run(ctx context.Context) {
	if p.status != nil {
		// Waited for: a leader releases the status Lease on its way out,
		// so that another replica takes over at once, not after it expires.
		released := make(chan struct{})
		go func() { defer close(released); p.status.run(ctx) }()
		defer func() { <-released }()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.kick:
		}
		p.dirtyMu.Lock()
		all, dirty := p.dirtyAll, p.dirty
		p.dirtyAll, p.dirty = false, map[string]struct{}{}
		p.dirtyMu.Unlock()
		p.mu.Lock()
		for s := range p.streams {
			if _, ok := dirty[p.serviceOf(s)]; all || ok {
				p.push(s)
			}
		}
		p.mu.Unlock()
		if p.status != nil {
			p.status.kick()
		}
	}
}

// changed marks the streams of the Services named by keys ("ns/name")
// for a recompute, or every stream when there are none (a Service
// changed: any policy may name it as a backend), and signals the
// recompute loop; it never blocks.
func (p *policies) changed(keys ...string) {
	p.dirtyMu.Lock()
	if len(keys) == 0 {
		p.dirtyAll = true
	}
	for _, k := range keys {
		p.dirty[k] = struct{}{}
	}
	p.dirtyMu.Unlock()
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// subscribe adds a stream for t as seen from the client's namespace and
// node and queues its first policy.
func (p *policies) subscribe(t target, client clientContext, tr *translator[*pb.OutboundPolicy]) (unsubscribe func()) {
	s := &policyStream{svcNS: t.Namespace, svcName: t.Name, ip: t.IP, port: t.Port, clientNS: client.NS, clientNode: client.NodeName, tr: tr}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.streams[s] = struct{}{}
	p.push(s)
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.streams, s)
	}
}

// push sends s its policy if it changed; p.mu is held.
func (p *policies) push(s *policyStream) {
	msg := p.policy(s)
	if s.last != nil && proto.Equal(s.last, msg) {
		return
	}
	s.last = msg
	s.tr.push(msg)
}

// policy computes the policy of s from the caches.
// An IP is looked up each time: proxies ask by ClusterIP, possibly before
// the Service is in the cache, and a ClusterIP may change hands.
func (p *policies) policy(s *policyStream) *pb.OutboundPolicy {
	ns, name := s.svcNS, s.svcName
	if s.ip.IsValid() {
		ns, name, _ = p.w.serviceByIP(s.ip)
	}
	if name == "" {
		return &pb.OutboundPolicy{Source: "default"}
	}
	svc, err := p.w.svcList.Services(ns).Get(name)
	if err != nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return &pb.OutboundPolicy{Source: "default"}
	}
	in := outboundpolicy.Input{
		ClusterDomain:   p.cfg.ClusterDomain,
		ClientNamespace: s.clientNS,
		ClientZone:      p.w.nodeZone(s.clientNode),
		Service:         svc,
		Port:            int32(s.port),
		HTTPRoutes:      listTyped[*gatewayv1.HTTPRoute](p.httpRoutes),
		GRPCRoutes:      listTyped[*gatewayv1.GRPCRoute](p.grpcRoutes),
		Profile:         p.profile(svc, s.clientNS),
		Services: func(ns, name string) (*corev1.Service, bool) {
			svc, err := p.w.svcList.Services(ns).Get(name)
			return svc, err == nil
		},
		Warn: func(err error) { p.warn(err) },
	}
	return outboundpolicy.Translate(in)
}

// profile finds the ServiceProfile of svc: the client's namespace first,
// then the Service's. An unreadable or invalid one (the validator should
// have refused it) counts as none: the next namespace's applies. p.mu is
// held.
func (p *policies) profile(svc *corev1.Service, clientNS string) *serviceprofile.ServiceProfile {
	if p.profiles == nil {
		return nil
	}
	name := svc.Name + "." + svc.Namespace + ".svc." + p.cfg.ClusterDomain
	for _, ns := range []string{clientNS, svc.Namespace} {
		if ns == "" {
			continue
		}
		obj, ok, err := p.profiles.GetIndexer().GetByKey(ns + "/" + name)
		if err != nil || !ok {
			continue
		}
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var sp serviceprofile.ServiceProfile
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &sp); err != nil {
			p.warn(fmt.Errorf("ServiceProfile %s/%s is not used: unreadable: %w", ns, name, err))
			continue
		}
		if err := sp.Validate(p.cfg.ClusterDomain); err != nil {
			p.warn(fmt.Errorf("ServiceProfile %s/%s is not used: %w", ns, name, err))
			continue
		}
		return &sp
	}
	return nil
}

// listTyped lists an informer's objects sorted by namespace/name (nil
// informer: none).
func listTyped[T metav1.Object](inf cache.SharedIndexInformer) []T {
	if inf == nil {
		return nil
	}
	objs := inf.GetStore().List()
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].GetNamespace() != out[j].GetNamespace() {
			return out[i].GetNamespace() < out[j].GetNamespace()
		}
		return out[i].GetName() < out[j].GetName()
	})
	return out
}

// specChanged reports whether an update may change a policy: a new spec
// or new annotations. A status write (ours, whenever a route's status
// changes) and a resync change neither.
func specChanged(oldObj, newObj any) bool {
	o, ok1 := oldObj.(metav1.Object)
	n, ok2 := newObj.(metav1.Object)
	if !ok1 || !ok2 || !maps.Equal(o.GetAnnotations(), n.GetAnnotations()) {
		return true
	}
	switch o := oldObj.(type) {
	case *gatewayv1.HTTPRoute:
		return !equality.Semantic.DeepEqual(o.Spec, newObj.(*gatewayv1.HTTPRoute).Spec)
	case *gatewayv1.GRPCRoute:
		return !equality.Semantic.DeepEqual(o.Spec, newObj.(*gatewayv1.GRPCRoute).Spec)
	case *unstructured.Unstructured:
		return !equality.Semantic.DeepEqual(o.Object["spec"], newObj.(*unstructured.Unstructured).Object["spec"])
	}
	return true
}

// serviceOf is the "ns/name" of the Service a stream asks about ("" for
// none); p.mu is held.
func (p *policies) serviceOf(s *policyStream) string {
	ns, name := s.svcNS, s.svcName
	if s.ip.IsValid() {
		ns, name, _ = p.w.serviceByIP(s.ip)
	}
	if name == "" {
		return ""
	}
	return ns + "/" + name
}

// affected names the Services ("ns/name") whose policies obj can change:
// a route's Service parents; a profile's Service. Anything else (a
// tombstone of an unknown kind) names nothing, which recomputes every
// stream.
func (p *policies) affected(obj any) []string {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	var refs []gatewayv1.ParentReference
	var ns string
	switch o := obj.(type) {
	case *gatewayv1.HTTPRoute:
		refs, ns = o.Spec.ParentRefs, o.Namespace
	case *gatewayv1.GRPCRoute:
		refs, ns = o.Spec.ParentRefs, o.Namespace
	case *unstructured.Unstructured:
		svc, rest, _ := strings.Cut(o.GetName(), ".")
		svcNS, _, _ := strings.Cut(rest, ".")
		if svc != "" && svcNS != "" {
			return []string{svcNS + "/" + svc}
		}
		return nil
	default:
		return nil
	}
	var out []string
	for _, r := range refs {
		if r.Kind == nil || *r.Kind != "Service" {
			continue
		}
		refNS := ns
		if r.Namespace != nil {
			refNS = string(*r.Namespace)
		}
		out = append(out, refNS+"/"+string(r.Name))
	}
	if len(out) == 0 {
		// Not attached to a Service: no stream's policy depends on it.
		return []string{""}
	}
	return out
}
