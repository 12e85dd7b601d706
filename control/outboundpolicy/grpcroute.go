package outboundpolicy

import (
	"fmt"
	"regexp"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// grpcRoute translates r: protocol gRPC, the method match as a path
// match on "/<service>/<method>". A rule without matches matches every
// request.
func (e *env) grpcRoute(r *gatewayv1.GRPCRoute) (*destinationpb.OutboundRoute, problems) {
	var p problems
	settings := e.routeSettings(r.Annotations, &p)
	out := &destinationpb.OutboundRoute{Ref: routeRef(kindGRPCRoute, &r.ObjectMeta), Protocol: destinationpb.OutboundRoute_GRPC, Hostnames: hostnames(r.Spec.Hostnames)}
	for i, rule := range r.Spec.Rules {
		at := fmt.Sprintf("rules[%d]", i)
		or := &destinationpb.OutboundRule{Filters: grpcFilters(rule.Filters, at, &p)}
		or.Matches = grpcRuleMatches(rule, at, &p)
		for j, b := range rule.BackendRefs {
			bat := fmt.Sprintf("%s.backendRefs[%d]", at, j)
			or.Backends = append(or.Backends, e.backend(b.BackendRef, r.Namespace, bat, grpcFilters(b.Filters, bat, &p), &p))
		}
		applySettings(or, settings)
		out.Rules = append(out.Rules, or)
	}
	return out, p
}

// grpcRuleMatches translates the matches of rule (at names it); none
// when it has none (the rule then matches every request).
func grpcRuleMatches(rule gatewayv1.GRPCRouteRule, at string, p *problems) []*destinationpb.RouteMatch {
	var out []*destinationpb.RouteMatch
	for j, m := range rule.Matches {
		out = append(out, grpcMatch(m, fmt.Sprintf("%s.matches[%d]", at, j), p))
	}
	return out
}

// grpcMatch: Exact service and method → EXACT "/svc/method"; service
// only → PREFIX "/svc/"; method only → REGEX "/[^/]+/method";
// RegularExpression → REGEX "/(?:<service>)/(?:<method>)", "[^/]+"
// for an empty one.
func grpcMatch(m gatewayv1.GRPCRouteMatch, at string, p *problems) *destinationpb.RouteMatch {
	out := &destinationpb.RouteMatch{}
	if mm := m.Method; mm != nil {
		service, method := deref(mm.Service), deref(mm.Method)
		switch {
		case mm.Type != nil && *mm.Type == gatewayv1.GRPCMethodMatchRegularExpression:
			checkRegex(service, at+".method.service", p)
			checkRegex(method, at+".method.method", p)
			out.Path = &destinationpb.PathMatch{Kind: destinationpb.PathMatch_REGEX, Value: "/" + orAny(service) + "/" + orAny(method)}
		case mm.Type != nil && *mm.Type != gatewayv1.GRPCMethodMatchExact:
			p.invalidf("%s.method: type %q is not supported", at, *mm.Type)
		case service != "" && method != "":
			out.Path = &destinationpb.PathMatch{Kind: destinationpb.PathMatch_EXACT, Value: "/" + service + "/" + method}
		case service != "":
			out.Path = &destinationpb.PathMatch{Kind: destinationpb.PathMatch_PREFIX, Value: "/" + service + "/"}
		case method != "":
			out.Path = &destinationpb.PathMatch{Kind: destinationpb.PathMatch_REGEX, Value: "/[^/]+/" + regexp.QuoteMeta(method)}
		}
	}
	for i, h := range m.Headers {
		regex := isRegex(h.Type, gatewayv1.GRPCHeaderMatchRegularExpression, h.Value, fmt.Sprintf("%s.headers[%d]", at, i), p)
		out.Headers = append(out.Headers, headerMatch(string(h.Name), h.Value, regex))
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// orAny is re as a group, or one path segment when re is empty.
func orAny(re string) string {
	if re == "" {
		return "[^/]+"
	}
	return "(?:" + re + ")"
}

// grpcFilters: a GRPCRoute filter is an HTTPRoute filter of the same
// type; the two header modifiers are supported, nothing else.
func grpcFilters(fs []gatewayv1.GRPCRouteFilter, at string, p *problems) []*destinationpb.Filter {
	hfs := make([]gatewayv1.HTTPRouteFilter, len(fs))
	for i, f := range fs {
		// Only the header modifiers are carried over: any other type
		// (RequestMirror, ExtensionRef) is unsupported or lacks its field.
		hfs[i] = gatewayv1.HTTPRouteFilter{Type: gatewayv1.HTTPRouteFilterType(f.Type), RequestHeaderModifier: f.RequestHeaderModifier, ResponseHeaderModifier: f.ResponseHeaderModifier}
	}
	return httpFilters(hfs, at, p)
}
