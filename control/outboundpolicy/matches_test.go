package outboundpolicy

import (
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

func TestHTTPRouteMatches(t *testing.T) {
	exact, get := gatewayv1.PathMatchExact, gatewayv1.HTTPMethodGet
	admin := "/admin"
	r := &gatewayv1.HTTPRoute{Spec: gatewayv1.HTTPRouteSpec{Rules: []gatewayv1.HTTPRouteRule{
		{Matches: []gatewayv1.HTTPRouteMatch{{Path: &gatewayv1.HTTPPathMatch{Type: &exact, Value: &admin}, Method: &get}}},
		{}, // no matches: the path prefix "/"
	}}}
	got, err := HTTPRouteMatches(r)
	if err != nil {
		t.Fatal(err)
	}
	want := []*destinationpb.RouteMatch{
		{Path: &destinationpb.PathMatch{Kind: destinationpb.PathMatch_EXACT, Value: "/admin"}, Method: "GET"},
		{Path: &destinationpb.PathMatch{Kind: destinationpb.PathMatch_PREFIX, Value: "/"}},
	}
	compareMatches(t, got, want)

	regex := gatewayv1.PathMatchRegularExpression
	bad := "("
	r.Spec.Rules[0].Matches[0].Path = &gatewayv1.HTTPPathMatch{Type: &regex, Value: &bad}
	if _, err := HTTPRouteMatches(r); err == nil || !strings.Contains(err.Error(), "rules[0].matches[0].path") {
		t.Errorf("bad regex: err %v, want one naming rules[0].matches[0].path", err)
	}
}

func TestGRPCRouteMatches(t *testing.T) {
	svc := "shop.Cart"
	r := &gatewayv1.GRPCRoute{Spec: gatewayv1.GRPCRouteSpec{Rules: []gatewayv1.GRPCRouteRule{
		{Matches: []gatewayv1.GRPCRouteMatch{{Method: &gatewayv1.GRPCMethodMatch{Service: &svc}}}},
		{}, // no matches: every request
	}}}
	got, err := GRPCRouteMatches(r)
	if err != nil {
		t.Fatal(err)
	}
	compareMatches(t, got, []*destinationpb.RouteMatch{
		{Path: &destinationpb.PathMatch{Kind: destinationpb.PathMatch_PREFIX, Value: "/shop.Cart/"}},
		{},
	})
}

func compareMatches(t *testing.T, got, want []*destinationpb.RouteMatch) {
	t.Helper()
	same := len(got) == len(want)
	for i := 0; same && i < len(got); i++ {
		same = proto.Equal(got[i], want[i])
	}
	if !same {
		t.Errorf("matches\n got %v\nwant %v", got, want)
	}
}
