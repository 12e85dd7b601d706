package destination

import (
	"context"
	"fmt"
	"log/slog"
	"sync"

	"google.golang.org/protobuf/proto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
)

// Informer index names of the inbound side.
const (
	indexServerParent   = "inboundServerParent"   // routes by "ns/name" of each Server parent
	indexAuthentication = "inboundAuthentication" // AuthorizationPolicies by "Kind/ns/name" of each authentication they require
)

// inbound is the GetInboundPolicy side of the server: the policy
// informers (on the route side's dynamic factory, typed by a transform),
// the open streams, and a recompute loop. Handlers only mark namespaces
// or pods dirty and signal the loop; they never block.
type inbound struct {
	cfg    Config
	log    *slog.Logger
	warned *onceLog
	w      *watcher
	p      *policies // its Gateway API route informers (nil: not served)

	namespaces cache.SharedIndexInformer
	// The policy.plexus.dev informers; nil when the CRD is not served.
	serverInf, authzInf, meshTLSInf, networkInf, rateLimitInf cache.SharedIndexInformer

	kick      chan struct{}
	dirtyMu   sync.Mutex
	dirtyNS   map[string]struct{} // namespaces whose streams to recompute
	dirtyPods map[string]struct{} // "ns/pod"

	mu      sync.Mutex
	streams map[*inboundStream]struct{}
}

// inboundStream is one GetInboundPolicy stream.
type inboundStream struct {
	ns, pod string
	port    uint16
	tr      *translator[*pb.InboundPolicy]
	last    *pb.InboundPolicy
}

// newInbound sets up the inbound informers: Namespaces on w's factory,
// handlers on w's Pods and p's routes, and each policy.plexus.dev kind
// the API server serves on p's dynamic factory (p.watch has run); a kind
// not served is logged and counts as none.
func newInbound(cfg Config, w *watcher, p *policies, c RouteClients, log *slog.Logger) (*inbound, error) {
	in := &inbound{cfg: cfg, log: log, warned: newOnceLog(log), w: w, p: p, kick: make(chan struct{}, 1),
		dirtyNS: map[string]struct{}{}, dirtyPods: map[string]struct{}{}, streams: map[*inboundStream]struct{}{}}
	handle := func(inf cache.SharedIndexInformer, changed func(obj any)) error {
		_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc: changed,
			UpdateFunc: func(oldObj, newObj any) {
				if specChanged(oldObj, newObj) {
					changed(oldObj)
					changed(newObj)
				}
			},
			DeleteFunc: changed,
		})
		return err
	}
	in.namespaces = w.factory.Core().V1().Namespaces().Informer()
	if err := handle(in.namespaces, in.changed); err != nil {
		return nil, fmt.Errorf("adding namespace handler: %w", err)
	}
	if _, err := w.pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    in.podChanged,
		UpdateFunc: func(oldObj, newObj any) { in.podChanged(oldObj); in.podChanged(newObj) },
		DeleteFunc: in.podChanged,
	}); err != nil {
		return nil, fmt.Errorf("adding inbound pod handler: %w", err)
	}
	for _, inf := range []cache.SharedIndexInformer{p.httpRoutes, p.grpcRoutes} {
		if inf == nil {
			continue
		}
		if err := inf.AddIndexers(cache.Indexers{indexServerParent: indexServerParents}); err != nil {
			return nil, fmt.Errorf("adding route indexers: %w", err)
		}
		if err := handle(inf, in.changed); err != nil {
			return nil, fmt.Errorf("adding inbound route handler: %w", err)
		}
	}
	for _, k := range []struct {
		inf       *cache.SharedIndexInformer
		gvr       schema.GroupVersionResource
		transform cache.TransformFunc
	}{
		{&in.serverInf, policyv1alpha1.ServerResource, in.decodeAs(func() metav1.Object { return &policyv1alpha1.Server{} })},
		{&in.authzInf, policyv1alpha1.AuthorizationPolicyResource, in.decodeAs(func() metav1.Object { return &policyv1alpha1.AuthorizationPolicy{} })},
		{&in.meshTLSInf, policyv1alpha1.MeshTLSAuthenticationResource, in.decodeAs(func() metav1.Object { return &policyv1alpha1.MeshTLSAuthentication{} })},
		{&in.networkInf, policyv1alpha1.NetworkAuthenticationResource, in.decodeAs(func() metav1.Object { return &policyv1alpha1.NetworkAuthentication{} })},
		{&in.rateLimitInf, policyv1alpha1.HTTPLocalRateLimitPolicyResource, in.decodeAs(func() metav1.Object { return &policyv1alpha1.HTTPLocalRateLimitPolicy{} })},
	} {
		ok, err := served(c.Discovery, k.gvr.GroupVersion().String(), k.gvr.Resource)
		if err != nil {
			return nil, err
		}
		if !ok {
			log.Warn("a policy CRD is not installed: its objects count as none (plexusctl install --crds; restart destination after)", "resource", k.gvr.GroupResource().String())
			continue
		}
		inf := p.dynFactory.ForResource(k.gvr).Informer()
		if err := inf.SetTransform(k.transform); err != nil {
			return nil, fmt.Errorf("typing %s: %w", k.gvr.Resource, err)
		}
		if err := handle(inf, in.changed); err != nil {
			return nil, fmt.Errorf("adding %s handler: %w", k.gvr.Resource, err)
		}
		*k.inf = inf
	}
	if in.authzInf != nil {
		if err := in.authzInf.AddIndexers(cache.Indexers{indexAuthentication: indexAuthentications}); err != nil {
			return nil, fmt.Errorf("adding AuthorizationPolicy indexers: %w", err)
		}
	}
	return in, nil
}

// decodeAs returns a transform that turns the dynamic informer's
// unstructured objects into the type newObj makes, managedFields dropped.
// One that does not decode is logged and stays unstructured: the reads
// below skip it (an authorization, authentication or rate limit that
// cannot be read counts as absent, granting nothing; a Server decodes
// even with fields this version does not know, see Decode).
func (in *inbound) decodeAs(newObj func() metav1.Object) cache.TransformFunc {
	return func(obj any) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return obj, nil // typed already, or a tombstone
		}
		u.SetManagedFields(nil)
		t := newObj()
		if err := policyv1alpha1.Decode(u, t); err != nil {
			in.warned.warn("policy resource cannot be read: ignored", "error", err)
			return u, nil
		}
		return t, nil
	}
}

// run recomputes the dirty streams after each signal until ctx ends.
func (in *inbound) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-in.kick:
		}
		in.dirtyMu.Lock()
		namespaces, pods := in.dirtyNS, in.dirtyPods
		in.dirtyNS, in.dirtyPods = map[string]struct{}{}, map[string]struct{}{}
		in.dirtyMu.Unlock()
		in.mu.Lock()
		for s := range in.streams {
			_, nsDirty := namespaces[s.ns]
			_, podDirty := pods[s.ns+"/"+s.pod]
			if nsDirty || podDirty {
				in.push(s)
			}
		}
		in.mu.Unlock()
	}
}

// subscribe adds a stream for pod's port and queues its first policy.
func (in *inbound) subscribe(pod *corev1.Pod, port uint16, tr *translator[*pb.InboundPolicy]) (unsubscribe func()) {
	s := &inboundStream{ns: pod.Namespace, pod: pod.Name, port: port, tr: tr}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.streams[s] = struct{}{}
	in.pushFor(s, pod)
	return func() {
		in.mu.Lock()
		defer in.mu.Unlock()
		delete(in.streams, s)
	}
}

// push recomputes s from the caches; a pod no longer there keeps its
// last policy (it is going away). in.mu is held.
func (in *inbound) push(s *inboundStream) {
	if pod, err := in.w.podList.Pods(s.ns).Get(s.pod); err == nil {
		in.pushFor(s, pod)
	}
}

// pushFor sends s the policy of pod if it changed; in.mu is held.
func (in *inbound) pushFor(s *inboundStream, pod *corev1.Pod) {
	msg := in.policy(pod, s.port)
	if s.last != nil && proto.Equal(s.last, msg) {
		return
	}
	s.last = msg
	s.tr.push(msg)
}

// mark marks namespaces and pods ("ns/name") dirty and signals the loop;
// it never blocks.
func (in *inbound) mark(namespaces, pods []string) {
	if len(namespaces) == 0 && len(pods) == 0 {
		return
	}
	in.dirtyMu.Lock()
	for _, ns := range namespaces {
		in.dirtyNS[ns] = struct{}{}
	}
	for _, p := range pods {
		in.dirtyPods[p] = struct{}{}
	}
	in.dirtyMu.Unlock()
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

func (in *inbound) podChanged(obj any) {
	if pod, ok := unwrap[*corev1.Pod](obj); ok {
		in.mark(nil, []string{pod.Namespace + "/" + pod.Name})
	}
}

// changed marks the namespaces whose streams obj may change.
func (in *inbound) changed(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	switch o := obj.(type) {
	case *corev1.Namespace:
		in.mark([]string{o.Name}, nil)
	case *gatewayv1.HTTPRoute:
		in.mark(namespacesOf(serverParents(o.Spec.ParentRefs, o.Namespace)), nil)
	case *gatewayv1.GRPCRoute:
		in.mark(namespacesOf(serverParents(o.Spec.ParentRefs, o.Namespace)), nil)
	case *policyv1alpha1.AuthorizationPolicy:
		in.mark(in.policyNamespaces(o), nil)
	case *policyv1alpha1.MeshTLSAuthentication:
		in.mark(in.referrerNamespaces(policyv1alpha1.MeshTLSAuthenticationKind, o.Namespace, o.Name), nil)
	case *policyv1alpha1.NetworkAuthentication:
		in.mark(in.referrerNamespaces(policyv1alpha1.NetworkAuthenticationKind, o.Namespace, o.Name), nil)
	case metav1.Object: // Server, HTTPLocalRateLimitPolicy, one that cannot be read
		in.mark(append([]string{o.GetNamespace()}, in.referrerNamespaces(kindOf(obj), o.GetNamespace(), o.GetName())...), nil)
	}
}
