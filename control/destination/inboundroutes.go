package destination

import (
	"cmp"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/control/outboundpolicy"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// inboundRoute is an HTTPRoute or GRPCRoute whose parent is a Server.
type inboundRoute struct {
	meta    *metav1.ObjectMeta
	kind    string
	matches func() ([]*pb.RouteMatch, error)
}

// serverRoutes returns the HTTPRoutes and GRPCRoutes whose parentRefs
// name srv, oldest first (then namespace, name, kind), each with its
// matches (control/outboundpolicy) and the authorizations of the
// AuthorizationPolicies that target it. A route whose matches the proxy
// could not use is left out, logged once.
func (in inboundComputation) serverRoutes(srv *policyv1alpha1.Server) []*pb.InboundRoute {
	key := srv.Namespace + "/" + srv.Name
	var rs []inboundRoute
	for _, r := range in.reads.ServerHTTPRoutes(key) {
		rs = append(rs, inboundRoute{&r.ObjectMeta, policyv1alpha1.HTTPRouteKind, func() ([]*pb.RouteMatch, error) { return outboundpolicy.HTTPRouteMatches(r) }})
	}
	for _, r := range in.reads.ServerGRPCRoutes(key) {
		rs = append(rs, inboundRoute{&r.ObjectMeta, policyv1alpha1.GRPCRouteKind, func() ([]*pb.RouteMatch, error) { return outboundpolicy.GRPCRouteMatches(r) }})
	}
	slices.SortFunc(rs, func(a, b inboundRoute) int {
		if c := a.meta.CreationTimestamp.Compare(b.meta.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Or(strings.Compare(a.meta.Namespace, b.meta.Namespace), strings.Compare(a.meta.Name, b.meta.Name), strings.Compare(a.kind, b.kind))
	})
	var out []*pb.InboundRoute
	for _, r := range rs {
		ms, err := r.matches()
		if err != nil {
			in.warn("route left out of inbound policies: the proxy could not use its matches",
				"route", r.kind+" "+r.meta.Namespace+"/"+r.meta.Name, "server", key, "problem", err)
			continue
		}
		out = append(out, &pb.InboundRoute{
			Ref:     &pb.ResourceRef{Group: policyv1alpha1.GatewayGroup, Kind: r.kind, Namespace: r.meta.Namespace, Name: r.meta.Name},
			Matches: ms,
			Authorizations: in.targetAuthorizations(r.meta.Namespace, func(t policyv1alpha1.TargetRef) bool {
				return t.IsKind(policyv1alpha1.GatewayGroup, r.kind) && t.Name == r.meta.Name
			}),
		})
	}
	return out
}

// serverParents returns "ns/name" of each Server (group
// policy.plexus.dev) that refs name. Only Servers in the route's own
// namespace: a route (and the AuthorizationPolicies on it, read from the
// route's namespace) in another namespace would otherwise open a Server
// to anyone who may create routes there (Linkerd ignores such refs too).
func serverParents(refs []gatewayv1.ParentReference, routeNS string) []string {
	var out []string
	for _, ref := range refs {
		if ref.Group == nil || string(*ref.Group) != policyv1alpha1.Group || ref.Kind == nil || string(*ref.Kind) != policyv1alpha1.ServerKind {
			continue
		}
		if ref.Namespace != nil && *ref.Namespace != "" && string(*ref.Namespace) != routeNS {
			continue
		}
		out = append(out, routeNS+"/"+string(ref.Name))
	}
	return out
}

// probeRoute returns the route of pod's own HTTP probes on port: GET on
// each probe's exact path, allowed unauthenticated from any address, as
// Linkerd's probe route; nil when the pod has no such probe. Limiting it
// to the node does not work: the kubelet's connection comes from the
// node's address on the pod network (a bridge's gateway, say), which the
// Node object does not list; status.hostIPs are not it.
func probeRoute(pod *corev1.Pod, port uint16) *pb.InboundRoute {
	var paths []string
	for _, c := range podContainers(pod) {
		for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe, c.StartupProbe} {
			if p == nil || p.HTTPGet == nil || !containerPort(c, p.HTTPGet.Port, port) {
				continue
			}
			// The kubelet sends the path's query as the query, and a
			// path without its leading / with one.
			path, _, _ := strings.Cut(p.HTTPGet.Path, "?")
			if !strings.HasPrefix(path, "/") {
				path = "/" + path
			}
			paths = append(paths, path)
		}
	}
	if len(paths) == 0 {
		return nil
	}
	r := &pb.InboundRoute{Ref: defaultRef("probe"), Authorizations: []*pb.Authorization{{Ref: defaultRef("probe")}}}
	for _, path := range sortedSet(paths) {
		r.Matches = append(r.Matches, &pb.RouteMatch{Path: &pb.PathMatch{Kind: pb.PathMatch_EXACT, Value: path}, Method: "GET"})
	}
	return r
}

// containerPort reports whether p (a number, or the name of one of c's
// ports, as the kubelet resolves a probe's port) is port.
func containerPort(c *corev1.Container, p intstr.IntOrString, port uint16) bool {
	if p.Type == intstr.Int {
		return p.IntVal == int32(port)
	}
	for _, cp := range c.Ports {
		if cp.Name == p.StrVal {
			return cp.ContainerPort == int32(port)
		}
	}
	return false
}

// rateLimit returns the limit of the HTTPLocalRateLimitPolicy that
// targets srv (several: the oldest, the conflict logged once), or nil.
func (in inboundComputation) rateLimit(srv *policyv1alpha1.Server) *pb.RateLimit {
	var chosen []*policyv1alpha1.HTTPLocalRateLimitPolicy
	for _, rl := range in.reads.HTTPLocalRateLimitPolicies(srv.Namespace) {
		if rl.Spec.TargetRef.IsKind(policyv1alpha1.Group, policyv1alpha1.ServerKind) && rl.Spec.TargetRef.Name == srv.Name {
			chosen = append(chosen, rl)
		}
	}
	if len(chosen) == 0 {
		return nil
	}
	oldestFirst(chosen)
	rl := chosen[0]
	if len(chosen) > 1 {
		in.warn("several HTTPLocalRateLimitPolicies target the same Server: the oldest applies",
			"server", srv.Namespace+"/"+srv.Name, "applies", rl.Name)
	}
	out := &pb.RateLimit{Ref: policyRef(policyv1alpha1.HTTPLocalRateLimitPolicyKind, &rl.ObjectMeta)}
	if l := rl.Spec.Total; l != nil {
		out.TotalPerSecond = perSecond(l.RequestsPerSecond)
	}
	if l := rl.Spec.Identity; l != nil {
		out.IdentityPerSecond = perSecond(l.RequestsPerSecond)
	}
	for _, o := range rl.Spec.Overrides {
		ov := &pb.RateLimitOverride{RequestsPerSecond: perSecond(o.RequestsPerSecond)}
		for _, c := range o.ClientRefs {
			if c.Kind == policyv1alpha1.ServiceAccountKind {
				ov.Identities = append(ov.Identities, spiffe.New(in.cfg.TrustDomain, cmp.Or(c.Namespace, rl.Namespace), c.Name).String())
			}
		}
		if len(ov.Identities) > 0 && ov.RequestsPerSecond > 0 {
			out.Overrides = append(out.Overrides, ov)
		}
	}
	return out
}

// perSecond is a rate the API server checked (at least 1); anything
// below is 0, no limit of that kind.
func perSecond(n int32) uint32 {
	return uint32(max(n, 0))
}
