package outboundpolicy

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// Resource kinds and groups as they appear in refs.
const (
	kindHTTPRoute = "HTTPRoute"
	kindGRPCRoute = "GRPCRoute"
	kindService   = "Service"
	groupCore     = "core"
	groupGateway  = "gateway.networking.k8s.io"
)

// problems keep a route from being Accepted (invalid: UnsupportedValue)
// or its refs from resolving (ResolvedRefs False).
type problems struct {
	invalid    []string
	unresolved []unresolvedRef
}

type unresolvedRef struct {
	reason  gatewayv1.RouteConditionReason
	message string
}

func (p *problems) invalidf(format string, args ...any) {
	p.invalid = append(p.invalid, fmt.Sprintf(format, args...))
}

func (p problems) accepted() bool { return len(p.invalid) == 0 }

// invalidMessage is the Accepted=False message: every problem.
func (p problems) invalidMessage() string { return strings.Join(p.invalid, "; ") }

func serviceRef(namespace, name string, port int32) *destinationpb.ResourceRef {
	return &destinationpb.ResourceRef{Group: groupCore, Kind: kindService, Namespace: namespace, Name: name, Port: uint32(port)}
}

// authority is the Get path of a Service port.
func (e *env) authority(namespace, name string, port int32) string {
	return fmt.Sprintf("%s.%s.svc.%s:%d", name, namespace, e.clusterDomain, port)
}

// permitted reports whether a route or ServiceProfile in fromNamespace
// may send to the Service namespace/name. Plexus does not read
// ReferenceGrants, so only what needs none is: a Service in fromNamespace,
// or the parent Service itself (a consumer route, or a client namespace's
// profile, sending to the Service it is for, GEP-1426). Anything else
// would let one namespace send every client's requests, with the client's
// identity, to a Service of a third namespace: a confused deputy.
func (e *env) permitted(fromNamespace, namespace, name string) bool {
	return namespace == fromNamespace || (namespace == e.parent.Namespace && name == e.parent.Name)
}

// notPermitted is the Failure of a backend that permitted refuses; from is
// what refers to it ("route", "ServiceProfile").
func notPermitted(from, namespace, name string) string {
	return fmt.Sprintf("backend Service %s/%s is in another namespace than the %s; cross-namespace backends need a ReferenceGrant, which Plexus does not support yet", namespace, name, from)
}

// serviceBackend is the backend Service namespace/name:port, with
// Failure set (and its reason returned) when the Service or the port does
// not exist. The caller has checked that it is permitted.
func (e *env) serviceBackend(namespace, name string, port int32, weight uint32) (*destinationpb.Backend, gatewayv1.RouteConditionReason) {
	b := &destinationpb.Backend{Ref: serviceRef(namespace, name, port), Weight: weight}
	svc, ok := e.services(namespace, name)
	switch {
	case !ok:
		b.Failure = fmt.Sprintf("Service %s/%s not found", namespace, name)
	case !hasPort(svc, port):
		b.Failure = fmt.Sprintf("Service %s/%s has no port %d", namespace, name, port)
	default:
		b.Authority = e.authority(namespace, name, port)
		return b, ""
	}
	return b, gatewayv1.RouteReasonBackendNotFound
}

func hasPort(svc *corev1.Service, port int32) bool {
	for _, p := range svc.Spec.Ports {
		if p.Port == port {
			return true
		}
	}
	return false
}

// backend resolves the backendRef at (its path in the route, for
// messages) of a route in routeNamespace, attached to e.parent. A backend
// that cannot be used is kept with Failure set, and recorded in p. One in
// another namespace that is not the parent is refused (RefNotPermitted)
// before it is looked up, so a route's status never tells whether a
// Service of another namespace exists.
func (e *env) backend(ref gatewayv1.BackendRef, routeNamespace, at string, filters []*destinationpb.Filter, p *problems) *destinationpb.Backend {
	namespace := routeNamespace
	if ref.Namespace != nil && *ref.Namespace != "" {
		namespace = string(*ref.Namespace)
	}
	weight := uint32(1)
	if ref.Weight != nil {
		weight = uint32(max(*ref.Weight, 0))
	}
	group, kind := groupCore, kindService
	if ref.Group != nil && *ref.Group != "" {
		group = string(*ref.Group)
	}
	if ref.Kind != nil {
		kind = string(*ref.Kind)
	}
	var b *destinationpb.Backend
	var reason gatewayv1.RouteConditionReason
	switch {
	case group != groupCore || kind != kindService:
		b = &destinationpb.Backend{Ref: &destinationpb.ResourceRef{Group: group, Kind: kind, Namespace: namespace, Name: string(ref.Name)}, Weight: weight}
		if ref.Port != nil {
			b.Ref.Port = uint32(*ref.Port)
		}
		groupKind := kind
		if group != groupCore {
			groupKind += "." + group
		}
		b.Failure = fmt.Sprintf("%s %s/%s is not a Service", groupKind, namespace, ref.Name)
		reason = gatewayv1.RouteReasonInvalidKind
	case !e.permitted(routeNamespace, namespace, string(ref.Name)):
		b = &destinationpb.Backend{Ref: serviceRef(namespace, string(ref.Name), 0), Weight: weight}
		if ref.Port != nil {
			b.Ref.Port = uint32(*ref.Port)
		}
		b.Failure = notPermitted("route", namespace, string(ref.Name))
		reason = gatewayv1.RouteReasonRefNotPermitted
	case ref.Port == nil:
		b = &destinationpb.Backend{Ref: serviceRef(namespace, string(ref.Name), 0), Weight: weight}
		b.Failure = fmt.Sprintf("Service %s/%s: backendRef has no port", namespace, ref.Name)
		reason = gatewayv1.RouteReasonBackendNotFound
	default:
		b, reason = e.serviceBackend(namespace, string(ref.Name), *ref.Port, weight)
	}
	if reason != "" {
		p.unresolved = append(p.unresolved, unresolvedRef{reason, at + ": " + b.Failure})
	}
	b.Filters = filters
	return b
}
