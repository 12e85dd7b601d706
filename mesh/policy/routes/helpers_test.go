package routes

import (
	"net/http"
	"strconv"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// Builders of policies, short enough to keep the tables readable.

func policy(routes ...*pb.OutboundRoute) *pb.OutboundPolicy {
	return &pb.OutboundPolicy{Source: "httproute", Routes: routes}
}

func profile(routes ...*pb.OutboundRoute) *pb.OutboundPolicy {
	return &pb.OutboundPolicy{Source: "serviceprofile", Routes: routes}
}

// route makes an HTTPRoute in namespace "ns" whose rules each have one
// backend "b".
func route(name string, hosts []string, rules ...*pb.OutboundRule) *pb.OutboundRoute {
	return &pb.OutboundRoute{
		Ref:       &pb.ResourceRef{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Namespace: "ns", Name: name},
		Hostnames: hosts,
		Rules:     rules,
	}
}

func rule(ms ...*pb.RouteMatch) *pb.OutboundRule {
	return &pb.OutboundRule{Matches: ms, Backends: []*pb.Backend{backend("b", 1)}}
}

func backend(name string, weight uint32) *pb.Backend {
	return &pb.Backend{
		Ref:       &pb.ResourceRef{Kind: "Service", Namespace: "ns", Name: name, Port: 80},
		Weight:    weight,
		Authority: name + ".ns.svc.cluster.local:80",
	}
}

func pathMatch(kind pb.PathMatch_Kind, v string) *pb.RouteMatch {
	return &pb.RouteMatch{Path: &pb.PathMatch{Kind: kind, Value: v}}
}

func exact(v string) *pb.RouteMatch  { return pathMatch(pb.PathMatch_EXACT, v) }
func prefix(v string) *pb.RouteMatch { return pathMatch(pb.PathMatch_PREFIX, v) }
func regex(v string) *pb.RouteMatch  { return pathMatch(pb.PathMatch_REGEX, v) }

func cond(c *pb.Condition) *pb.RouteMatch { return &pb.RouteMatch{Condition: c} }

func condMethodOf(m string) *pb.Condition {
	return &pb.Condition{Kind: &pb.Condition_Method{Method: m}}
}
func condPathOf(re string) *pb.Condition {
	return &pb.Condition{Kind: &pb.Condition_PathRegex{PathRegex: re}}
}
func condAllOf(cs ...*pb.Condition) *pb.Condition {
	return &pb.Condition{Kind: &pb.Condition_All{All: &pb.Conditions{Conditions: cs}}}
}
func condAnyOf(cs ...*pb.Condition) *pb.Condition {
	return &pb.Condition{Kind: &pb.Condition_Any{Any: &pb.Conditions{Conditions: cs}}}
}
func condNotOf(c *pb.Condition) *pb.Condition {
	return &pb.Condition{Kind: &pb.Condition_Not{Not: c}}
}

func mustCompile(t testing.TB, p *pb.OutboundPolicy) *Table {
	t.Helper()
	tb, err := Compile(p)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return tb
}

// ruleName names a rule "route/index", "" for none.
func ruleName(r *Rule, ok bool) string {
	if !ok {
		return ""
	}
	return r.Route.Ref.Name + "/" + strconv.Itoa(r.Index)
}

// get makes a GET request for target with authority "web.ns:80".
func get(target string) *Request {
	return &Request{Method: "GET", Authority: "web.ns:80", Target: target, Header: http.Header{}}
}

func newDuration(seconds int64) *durationpb.Duration { return &durationpb.Duration{Seconds: seconds} }

func statusIn(min, max uint32) *pb.ResponseMatch {
	return &pb.ResponseMatch{Kind: &pb.ResponseMatch_Status{Status: &pb.StatusRange{Min: min, Max: max}}}
}
