package destination

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// Inbound policies (GetInboundPolicy): who may connect to one port of a
// pod, and send it which requests (ARCHITECTURE.md §9), computed as a pure
// function of what InboundReads returns: the caches (inboundwatch.go) or
// listed objects (inboundreads.go, ComputeInboundPolicy). This file: the
// Server of a port, or the default policy; inboundauthz.go:
// AuthorizationPolicies; inboundroutes.go: routes, probes, rate limits.

// Annotations read by inbound policies.
const (
	// AnnotationDefaultInboundPolicy on a pod or namespace overrides the
	// cluster's default inbound policy.
	AnnotationDefaultInboundPolicy = podcontract.AnnotationPrefix + "default-inbound-policy"
	// AnnotationDryRun "true" on an AuthorizationPolicy: reported, not
	// enforced.
	AnnotationDryRun = policyv1alpha1.Group + "/dry-run"
)

// kindDefault is the kind of what the control plane makes up: default
// policies, the probe route, the catch-all route.
const kindDefault = "default"

func defaultRef(name string) *pb.ResourceRef {
	return &pb.ResourceRef{Kind: kindDefault, Name: name}
}

// policyRef names a policy.plexus.dev object.
func policyRef(kind string, meta *metav1.ObjectMeta) *pb.ResourceRef {
	return &pb.ResourceRef{Group: policyv1alpha1.Group, Kind: kind, Namespace: meta.Namespace, Name: meta.Name}
}

// policy computes the inbound policy of pod's port from the caches.
func (in *inbound) policy(pod *corev1.Pod, port uint16) *pb.InboundPolicy {
	return inboundComputation{reads: in, cfg: in.cfg, warn: in.warned.warn}.policy(pod, port)
}

// policy computes the inbound policy of pod's port.
func (in inboundComputation) policy(pod *corev1.Pod, port uint16) *pb.InboundPolicy {
	var out *pb.InboundPolicy
	var routes []*pb.InboundRoute
	if srv := in.server(pod, port); srv != nil {
		out = &pb.InboundPolicy{
			Server:         policyRef(policyv1alpha1.ServerKind, &srv.ObjectMeta),
			Protocol:       string(cmp.Or(srv.Spec.ProxyProtocol, policyv1alpha1.ProtocolUnknown)),
			Authorizations: in.serverAuthorizations(srv),
			RateLimit:      in.rateLimit(srv),
		}
		access, audit := in.access(cmp.Or(srv.Spec.AccessPolicy, policyv1alpha1.DefaultServerAccessPolicy))
		out.Authorizations = append(out.Authorizations, access...)
		out.Audit = audit
		routes = in.serverRoutes(srv)
	} else {
		name := in.defaultPolicy(pod)
		access, audit := in.access(name)
		out = &pb.InboundPolicy{Server: defaultRef(string(name)), Protocol: string(policyv1alpha1.ProtocolUnknown), Authorizations: access, Audit: audit}
	}
	if probe := probeRoute(pod, port); probe != nil {
		if len(routes) == 0 {
			// Requests other than probes: on the port's authorizations.
			routes = []*pb.InboundRoute{{Ref: defaultRef("default")}}
		}
		routes = append(routes, probe)
	}
	out.Routes = routes
	return out
}

// access returns the authorizations of a default inbound policy or a
// Server's accessPolicy: one named after it (kind default), none for
// deny and audit; audit is true for audit.
func (in inboundComputation) access(policy policyv1alpha1.AccessPolicy) (authzs []*pb.Authorization, audit bool) {
	a := &pb.Authorization{Ref: defaultRef(string(policy))}
	switch policy {
	case policyv1alpha1.AllUnauthenticated:
	case policyv1alpha1.AllAuthenticated:
		a.MeshTls = true
	case policyv1alpha1.ClusterUnauthenticated:
		a.Networks = in.clusterNetworks()
	case policyv1alpha1.ClusterAuthenticated:
		a.Networks, a.MeshTls = in.clusterNetworks(), true
	case policyv1alpha1.Audit:
		return nil, true
	default: // deny; the API server and defaultPolicy admit nothing else
		return nil, false
	}
	return []*pb.Authorization{a}, false
}

func (in inboundComputation) clusterNetworks() []*pb.Network {
	out := make([]*pb.Network, len(in.cfg.ClusterNetworks))
	for i, n := range in.cfg.ClusterNetworks {
		out[i] = &pb.Network{Cidr: n.String()}
	}
	return out
}

// defaultPolicy is the default inbound policy of pod: its annotation,
// else its namespace's, else the cluster's. A malformed annotation is
// logged once and skipped.
func (in inboundComputation) defaultPolicy(pod *corev1.Pod) policyv1alpha1.AccessPolicy {
	if p, ok := in.annotatedPolicy(pod.Annotations, "pod", pod.Namespace+"/"+pod.Name); ok {
		return p
	}
	if ns := in.reads.Namespace(pod.Namespace); ns != nil {
		if p, ok := in.annotatedPolicy(ns.Annotations, "namespace", ns.Name); ok {
			return p
		}
	}
	return in.cfg.DefaultInboundPolicy
}

func (in inboundComputation) annotatedPolicy(annotations map[string]string, kind, name string) (policyv1alpha1.AccessPolicy, bool) {
	v, ok := annotations[AnnotationDefaultInboundPolicy]
	if !ok {
		return "", false
	}
	if p := policyv1alpha1.AccessPolicy(v); slices.Contains(policyv1alpha1.AccessPolicies(), p) {
		return p, true
	}
	in.warn("malformed default inbound policy annotation: ignored, the next level's applies (pod, namespace, cluster)",
		kind, name, "annotation", AnnotationDefaultInboundPolicy, "value", v, "want", policyv1alpha1.AccessPolicies())
	return "", false
}

// server returns the Server of pod's port, or nil: of the Servers of the
// pod's namespace that select the pod and the port, the oldest (then by
// name), the conflict logged once.
func (in inboundComputation) server(pod *corev1.Pod, port uint16) *policyv1alpha1.Server {
	var chosen []*policyv1alpha1.Server
	for _, s := range in.reads.Servers(pod.Namespace) {
		if in.selects(s, pod, port) {
			chosen = append(chosen, s)
		}
	}
	if len(chosen) == 0 {
		return nil
	}
	oldestFirst(chosen)
	if len(chosen) > 1 {
		names := make([]string, len(chosen))
		for i, s := range chosen {
			names[i] = s.Name
		}
		in.warn("several Servers select the same pod port: the oldest applies",
			"namespace", pod.Namespace, "servers", strings.Join(names, ","), "port", port, "applies", chosen[0].Name)
	}
	return chosen[0]
}

// selects reports whether s selects pod's port: its podSelector matches
// the pod's labels and its port is the number, or the name of a
// container port with that number.
func (in inboundComputation) selects(s *policyv1alpha1.Server, pod *corev1.Pod, port uint16) bool {
	sel, err := metav1.LabelSelectorAsSelector(&s.Spec.PodSelector)
	if err != nil {
		in.warn("Server with an invalid podSelector selects nothing", "server", s.Namespace+"/"+s.Name, "error", err)
		return false
	}
	if !sel.Matches(labels.Set(pod.Labels)) {
		return false
	}
	if s.Spec.Port.Type == intstr.Int {
		return s.Spec.Port.IntVal == int32(port)
	}
	for _, c := range podContainers(pod) {
		for _, cp := range c.Ports {
			if cp.Name == s.Spec.Port.StrVal && cp.ContainerPort == int32(port) {
				return true
			}
		}
	}
	return false
}

// podContainers returns the pod's init containers (native sidecars may
// serve ports and have probes) and containers.
func podContainers(pod *corev1.Pod) []*corev1.Container {
	out := make([]*corev1.Container, 0, len(pod.Spec.InitContainers)+len(pod.Spec.Containers))
	for i := range pod.Spec.InitContainers {
		out = append(out, &pod.Spec.InitContainers[i])
	}
	for i := range pod.Spec.Containers {
		out = append(out, &pod.Spec.Containers[i])
	}
	return out
}

// oldestFirst sorts objects by creation time, then name.
func oldestFirst[T metav1.Object](objs []T) {
	slices.SortStableFunc(objs, func(a, b T) int {
		if c := a.GetCreationTimestamp().Compare(b.GetCreationTimestamp().Time); c != 0 {
			return c
		}
		return strings.Compare(a.GetName(), b.GetName())
	})
}
