// Package outboundpolicy translates a Service port's HTTPRoutes, GRPCRoutes and
// ServiceProfile into the outbound policy a proxy receives
// (destinationpb.OutboundPolicy), and computes the routes' status
// (ARCHITECTURE.md §8). Everything here is a pure function of its input.
package outboundpolicy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/control/serviceprofile"
	"github.com/plexus-mesh/plexus/mesh/api/balancerannotations"
	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/api/routeannotations"
)

// Source values of OutboundPolicy.
const (
	SourceDefault        = "default"
	SourceRoutes         = "httproute"
	SourceServiceProfile = "serviceprofile"
)

// Input is what the policy of one Service port depends on.
type Input struct {
	ClusterDomain string
	// ClientNamespace is the asking proxy's namespace; "" (unknown): the
	// producer routes only.
	ClientNamespace string
	// ClientZone is the asking proxy's zone (its node's
	// topology.kubernetes.io/zone); "" (unknown): no zone-aware balancing.
	ClientZone string
	// Service is the parent; it must not be nil.
	Service *corev1.Service
	// Port is the Service port the client connects to.
	Port int32
	// HTTPRoutes and GRPCRoutes are candidates: those without a parentRef
	// to Service and Port are skipped, so the caller may pass every route
	// in the cluster.
	HTTPRoutes []*gatewayv1.HTTPRoute
	GRPCRoutes []*gatewayv1.GRPCRoute
	// Profile is the ServiceProfile the caller chose (the client
	// namespace's, else the Service's), or nil. An invalid one (Validate)
	// is not used.
	Profile *serviceprofile.ServiceProfile
	// Services looks up backends; nil finds none.
	Services func(namespace, name string) (*corev1.Service, bool)
	// Warn, if set, is called at most once per Translate with what was
	// left out that no route status can carry: the Service's malformed
	// annotations (each one dropped, the valid ones applied) and an
	// invalid Profile (not used at all). Routes report their own problems
	// in their status (see HTTPRouteParents).
	Warn func(error)
}

// Translate returns the outbound policy of in.Service:in.Port. Its
// routes come from the ServiceProfile when it has routes or dstOverrides
// (source "serviceprofile"), else from the Accepted routes attached to
// the port (source "httproute"; the GRPCRoutes alone when there are
// any), else a default route to the Service
// itself (source "default"). Whatever the source, FailureAccrual comes
// from the Service's balancer annotations, and ZoneAware from them and its
// trafficDistribution when the client's zone is known. The output is
// deterministic.
func Translate(in Input) *destinationpb.OutboundPolicy {
	e := newEnv(in)
	var serviceErr error
	e.service, serviceErr = routeannotations.Parse(in.Service.Annotations)
	accrual, accrualErr := failureAccrual(in.Service.Annotations)
	zoneAware, zoneErr := balancerannotations.ParseZoneAware(in.Service.Annotations, in.Service.Spec.TrafficDistribution)
	servicePrefix := fmt.Sprintf("Service %s/%s: ", in.Service.Namespace, in.Service.Name)
	warnings := append(prefixEach(servicePrefix, serviceErr), prefixEach(servicePrefix, accrualErr)...)
	warnings = append(warnings, prefixEach(servicePrefix, zoneErr)...)
	profile := in.Profile
	if profile != nil {
		if err := profile.Validate(in.ClusterDomain); err != nil {
			warnings = append(warnings, prefixEach(fmt.Sprintf("ServiceProfile %s/%s is not used: ", profile.Namespace, profile.Name), err)...)
			profile = nil
		}
	}
	if in.Warn != nil && len(warnings) > 0 {
		in.Warn(errors.Join(warnings...))
	}

	policy := &destinationpb.OutboundPolicy{
		Parent:         e.parentRef(),
		Opaque:         profile != nil && slices.Contains(profile.Spec.OpaquePorts, uint32(in.Port)),
		FailureAccrual: accrual,
	}
	if zoneAware && in.ClientZone != "" {
		policy.ZoneAware = &destinationpb.ZoneAware{LocalZone: in.ClientZone}
	}
	switch {
	case profile != nil && (len(profile.Spec.Routes) > 0 || len(profile.Spec.DstOverrides) > 0):
		policy.Source = SourceServiceProfile
		policy.Routes = e.profileRoutes(profile)
	default:
		policy.Routes = e.gatewayRoutes(in)
		policy.Source = SourceRoutes
		if len(policy.Routes) == 0 {
			policy.Source = SourceDefault
			policy.Routes = []*destinationpb.OutboundRoute{e.defaultRoute()}
		}
	}
	return policy
}

// prefixEach returns each error joined in err (errors.Join) with prefix.
func prefixEach(prefix string, err error) []error {
	if err == nil {
		return nil
	}
	errs := []error{err}
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		errs = joined.Unwrap()
	}
	out := make([]error, len(errs))
	for i, e := range errs {
		out[i] = fmt.Errorf("%s%w", prefix, e)
	}
	return out
}

// env is what translating a route needs besides the route.
type env struct {
	clusterDomain string
	services      func(namespace, name string) (*corev1.Service, bool)
	parent        *corev1.Service
	port          int32
	// service: the parent Service's valid annotations.
	service routeannotations.Settings
}

func newEnv(in Input) *env {
	services := in.Services
	if services == nil {
		services = func(string, string) (*corev1.Service, bool) { return nil, false }
	}
	return &env{clusterDomain: in.ClusterDomain, services: services, parent: in.Service, port: in.Port}
}

// gatewayRoute is an HTTPRoute or a GRPCRoute reduced to what choosing
// and ordering them needs.
type gatewayRoute struct {
	meta       *metav1.ObjectMeta
	kind       string
	parentRefs []gatewayv1.ParentReference
	// translate returns the route, or the problems that keep it from
	// being Accepted.
	translate func(e *env) (*destinationpb.OutboundRoute, problems)
}

func httpRoutes(rs []*gatewayv1.HTTPRoute) []gatewayRoute {
	out := make([]gatewayRoute, 0, len(rs))
	for _, r := range rs {
		out = append(out, gatewayRoute{&r.ObjectMeta, kindHTTPRoute, r.Spec.ParentRefs, func(e *env) (*destinationpb.OutboundRoute, problems) { return e.httpRoute(r) }})
	}
	return out
}

func grpcRoutes(rs []*gatewayv1.GRPCRoute) []gatewayRoute {
	out := make([]gatewayRoute, 0, len(rs))
	for _, r := range rs {
		out = append(out, gatewayRoute{&r.ObjectMeta, kindGRPCRoute, r.Spec.ParentRefs, func(e *env) (*destinationpb.OutboundRoute, problems) { return e.grpcRoute(r) }})
	}
	return out
}

// gatewayRoutes returns the Accepted routes attached to the parent port
// that apply to the client (GEP-1426): the client namespace's consumer
// routes if it has any, else the producer routes (those in the Service's
// namespace). A route that is not Accepted counts as absent, so it
// neither shadows the producer routes nor reaches the proxy. Of those,
// the GRPCRoutes alone if there are any. Order: oldest first, then
// namespace/name.
func (e *env) gatewayRoutes(in Input) []*destinationpb.OutboundRoute {
	var producer, consumer []gatewayRoute
	for _, r := range append(httpRoutes(in.HTTPRoutes), grpcRoutes(in.GRPCRoutes)...) {
		if !e.attaches(r) {
			continue
		}
		if r.meta.Namespace == e.parent.Namespace {
			producer = append(producer, r)
		} else if in.ClientNamespace != "" && r.meta.Namespace == in.ClientNamespace {
			consumer = append(consumer, r)
		}
	}
	chosen := e.accepted(consumer)
	if len(chosen) == 0 {
		chosen = e.accepted(producer)
	}
	// As Linkerd's policy controller: GRPCRoutes, when there are any,
	// are used alone.
	if slices.ContainsFunc(chosen, func(r accepted) bool { return r.kind == kindGRPCRoute }) {
		chosen = slices.DeleteFunc(chosen, func(r accepted) bool { return r.kind != kindGRPCRoute })
	}
	slices.SortStableFunc(chosen, func(a, b accepted) int { return compareRoutes(a.gatewayRoute, b.gatewayRoute) })
	out := make([]*destinationpb.OutboundRoute, len(chosen))
	for i, r := range chosen {
		out[i] = r.route
	}
	return out
}

type accepted struct {
	gatewayRoute
	route *destinationpb.OutboundRoute
}

func (e *env) accepted(rs []gatewayRoute) []accepted {
	var out []accepted
	for _, r := range rs {
		if route, p := r.translate(e); p.accepted() {
			out = append(out, accepted{r, route})
		}
	}
	return out
}

func compareRoutes(a, b gatewayRoute) int {
	if c := a.meta.CreationTimestamp.Compare(b.meta.CreationTimestamp.Time); c != 0 {
		return c
	}
	return cmp.Or(strings.Compare(a.meta.Namespace, b.meta.Namespace), strings.Compare(a.meta.Name, b.meta.Name), strings.Compare(a.kind, b.kind))
}

// attaches reports whether one of r's parentRefs is the parent Service
// with the port unset or equal to the port asked for.
func (e *env) attaches(r gatewayRoute) bool {
	for _, ref := range r.parentRefs {
		if isServiceParent(ref) && parentNamespace(ref, r.meta.Namespace) == e.parent.Namespace &&
			string(ref.Name) == e.parent.Name && (ref.Port == nil || *ref.Port == e.port) {
			return true
		}
	}
	return false
}

// isServiceParent reports whether ref names a core Service: kind
// Service, group "" or "core" (or unset, which only an object that
// skipped the CRD's defaulting has).
func isServiceParent(ref gatewayv1.ParentReference) bool {
	return ref.Kind != nil && *ref.Kind == "Service" && (ref.Group == nil || *ref.Group == "" || *ref.Group == "core")
}

func parentNamespace(ref gatewayv1.ParentReference, routeNamespace string) string {
	if ref.Namespace != nil && *ref.Namespace != "" {
		return string(*ref.Namespace)
	}
	return routeNamespace
}

// parentRef is the policy's parent: the Service and port.
func (e *env) parentRef() *destinationpb.ResourceRef {
	return serviceRef(e.parent.Namespace, e.parent.Name, e.port)
}

// parentBackend is the parent Service itself as the one backend.
func (e *env) parentBackend() *destinationpb.Backend {
	return &destinationpb.Backend{Ref: e.parentRef(), Weight: 1, Authority: e.authority(e.parent.Namespace, e.parent.Name, e.port)}
}

// defaultRoute sends every request to the parent Service, with the
// Service's annotations applied: protocol gRPC when the port's
// appProtocol is grpc, else HTTP.
func (e *env) defaultRoute() *destinationpb.OutboundRoute {
	name, protocol := "http", destinationpb.OutboundRoute_HTTP
	for _, p := range e.parent.Spec.Ports {
		if p.Port == e.port && p.AppProtocol != nil && strings.EqualFold(*p.AppProtocol, "grpc") {
			name, protocol = "grpc", destinationpb.OutboundRoute_GRPC
		}
	}
	rule := &destinationpb.OutboundRule{Backends: []*destinationpb.Backend{e.parentBackend()}}
	applySettings(rule, e.service)
	return &destinationpb.OutboundRoute{Ref: &destinationpb.ResourceRef{Kind: "default", Name: name}, Protocol: protocol, Rules: []*destinationpb.OutboundRule{rule}}
}
