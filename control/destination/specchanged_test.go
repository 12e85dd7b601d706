package destination

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
