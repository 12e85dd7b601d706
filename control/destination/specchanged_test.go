package destination

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// A route's status write (ours) or a resync does not recompute every
// stream; a spec or annotation change does.
func TestSpecChanged(t *testing.T) {
	route := func(host string, ann map[string]string, cond string) *gatewayv1.HTTPRoute {
		r := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Name: "r", Annotations: ann}}
		r.Spec.Hostnames = []gatewayv1.Hostname{gatewayv1.Hostname(host)}
		r.Status.Parents = []gatewayv1.RouteParentStatus{{ControllerName: gatewayv1.GatewayController(cond)}}
		return r
	}
	profile := func(timeout string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "p"},
			"spec": map[string]any{"routes": []any{map[string]any{"name": "r", "timeout": timeout}}}}}
	}
	for _, c := range []struct {
		name     string
		old, new any
		want     bool
	}{
		{"status only", route("a", nil, "x"), route("a", nil, "y"), false},
		{"resync", route("a", nil, "x"), route("a", nil, "x"), false},
		{"spec", route("a", nil, "x"), route("b", nil, "x"), true},
		{"annotation", route("a", nil, "x"), route("a", map[string]string{"retry.plexus.dev/limit": "2"}, "x"), true},
		{"profile same", profile("1s"), profile("1s"), false},
		{"profile spec", profile("1s"), profile("2s"), true},
	} {
		if got := specChanged(c.old, c.new); got != c.want {
			t.Errorf("%s: specChanged = %v, want %v", c.name, got, c.want)
		}
	}
}

// A route's change recomputes the streams of its Service parents only; a
// profile's, its Service's.
func TestAffectedServices(t *testing.T) {
	p := &policies{}
	svc, gw := gatewayv1.Kind("Service"), gatewayv1.Kind("Gateway")
	other := gatewayv1.Namespace("other")
	route := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "r"}}
	route.Spec.ParentRefs = []gatewayv1.ParentReference{
		{Kind: &svc, Name: "web"},
		{Kind: &svc, Namespace: &other, Name: "api"},
		{Kind: &gw, Name: "edge"},
	}
	if got := p.affected(route); len(got) != 2 || got[0] != "ns/web" || got[1] != "other/api" {
		t.Errorf("route: %q, want [ns/web other/api]", got)
	}
	prof := &unstructured.Unstructured{Object: map[string]any{}}
	prof.SetName("books.shop.svc.cluster.local")
	if got := p.affected(prof); len(got) != 1 || got[0] != "shop/books" {
		t.Errorf("profile: %q, want [shop/books]", got)
	}
	if got := p.affected(cache.DeletedFinalStateUnknown{Obj: route}); len(got) != 2 {
		t.Errorf("tombstone: %q, want the route's parents", got)
	}
	gwOnly := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "g"}}
	gwOnly.Spec.ParentRefs = []gatewayv1.ParentReference{{Kind: &gw, Name: "edge"}}
	if got := p.affected(gwOnly); len(got) != 1 || got[0] != "" {
		t.Errorf("gateway-only route: %q, want [\"\"] (no Service stream)", got)
	}
}
