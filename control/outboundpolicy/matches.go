package outboundpolicy

import (
	"errors"
	"fmt"

	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// HTTPRouteMatches returns the matches of every rule of r, translated as
// for an outbound route (a rule without matches matches the path prefix
// "/"): what an inbound route of a Server (GetInboundPolicy) matches. A
// request matches the route when it matches any of them. The error names
// every match the proxy could not use (an unsupported type, a regular
// expression that does not compile); the matches are returned all the
// same.
func HTTPRouteMatches(r *gatewayv1.HTTPRoute) ([]*destinationpb.RouteMatch, error) {
	var p problems
	var out []*destinationpb.RouteMatch
	for i, rule := range r.Spec.Rules {
		out = append(out, httpRuleMatches(rule, fmt.Sprintf("rules[%d]", i), &p)...)
	}
	return out, p.matchErr()
}

// GRPCRouteMatches is HTTPRouteMatches for a GRPCRoute: a rule without
// matches matches every request, as the empty RouteMatch.
func GRPCRouteMatches(r *gatewayv1.GRPCRoute) ([]*destinationpb.RouteMatch, error) {
	var p problems
	var out []*destinationpb.RouteMatch
	for i, rule := range r.Spec.Rules {
		ms := grpcRuleMatches(rule, fmt.Sprintf("rules[%d]", i), &p)
		if len(ms) == 0 {
			ms = []*destinationpb.RouteMatch{{}}
		}
		out = append(out, ms...)
	}
	return out, p.matchErr()
}

func (p problems) matchErr() error {
	if p.accepted() {
		return nil
	}
	return errors.New(p.invalidMessage())
}
