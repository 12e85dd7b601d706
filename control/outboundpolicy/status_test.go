package outboundpolicy

import (
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

func ptrTo[T any](v T) *T { return &v }

func serviceParent(name string, port *int32) gatewayv1.ParentReference {
	return gatewayv1.ParentReference{Group: ptrTo[gatewayv1.Group]("core"), Kind: ptrTo[gatewayv1.Kind]("Service"), Name: gatewayv1.ObjectName(name), Port: port}
}

func services(svcs ...*corev1.Service) func(string, string) (*corev1.Service, bool) {
	return func(ns, name string) (*corev1.Service, bool) {
		for _, s := range svcs {
			if s.Namespace == ns && s.Name == name {
				return s, true
			}
		}
		return nil, false
	}
}

var webService = &corev1.Service{
	ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
	Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
}

func testRoute(annotations map[string]string, backend string, parents ...gatewayv1.ParentReference) *gatewayv1.HTTPRoute {
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "r", Generation: 5, Annotations: annotations},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: parents},
			Rules: []gatewayv1.HTTPRouteRule{{BackendRefs: []gatewayv1.HTTPBackendRef{{BackendRef: gatewayv1.BackendRef{
				BackendObjectReference: gatewayv1.BackendObjectReference{Name: gatewayv1.ObjectName(backend), Port: ptrTo[int32](80)},
			}}}}},
		},
	}
}

type cond struct {
	typ, status, reason, message string
}

func conds(s gatewayv1.RouteParentStatus) []cond {
	var out []cond
	for _, c := range s.Conditions {
		out = append(out, cond{c.Type, string(c.Status), c.Reason, c.Message})
	}
	return out
}

func TestHTTPRouteParents(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	gateway := gatewayv1.ParentReference{Name: "ingress"}
	r := testRoute(map[string]string{"retry.plexus.dev/limit": "x"}, "missing",
		gateway, serviceParent("web", ptrTo[int32](80)), serviceParent("web", ptrTo[int32](81)), serviceParent("nope", nil))
	got := HTTPRouteParents(r, services(webService), now)
	if len(got) != 3 {
		t.Fatalf("got %d entries, want 3 (the Gateway parent is not ours): %+v", len(got), got)
	}
	unresolved := cond{"ResolvedRefs", "False", "BackendNotFound", "rules[0].backendRefs[0]: Service shop/missing not found"}
	want := [][]cond{
		{{"Accepted", "False", "UnsupportedValue", `retry.plexus.dev/limit: "x" is not a non-negative integer`}, unresolved},
		{{"Accepted", "False", "NoMatchingParent", "Service shop/web has no port 81"}, unresolved},
		{{"Accepted", "False", "NoMatchingParent", "Service shop/nope not found"}, unresolved},
	}
	for i, s := range got {
		if s.ControllerName != ControllerName {
			t.Errorf("entry %d: controller %q", i, s.ControllerName)
		}
		if !equality.Semantic.DeepEqual(s.ParentRef, r.Spec.ParentRefs[i+1]) {
			t.Errorf("entry %d: parentRef %+v, want the spec's %+v", i, s.ParentRef, r.Spec.ParentRefs[i+1])
		}
		if !slices.Equal(conds(s), want[i]) {
			t.Errorf("entry %d:\n got %+v\nwant %+v", i, conds(s), want[i])
		}
		for _, c := range s.Conditions {
			if c.ObservedGeneration != 5 || !c.LastTransitionTime.Equal(&now) {
				t.Errorf("entry %d %s: generation %d time %v", i, c.Type, c.ObservedGeneration, c.LastTransitionTime)
			}
		}
	}

	ok := HTTPRouteParents(testRoute(nil, "web", serviceParent("web", nil)), services(webService), now)
	wantOK := []cond{{"Accepted", "True", "Accepted", ""}, {"ResolvedRefs", "True", "ResolvedRefs", ""}}
	if len(ok) != 1 || !slices.Equal(conds(ok[0]), wantOK) {
		t.Errorf("valid route: %+v", ok)
	}
	if none := HTTPRouteParents(testRoute(nil, "web", gateway), services(webService), now); len(none) != 0 {
		t.Errorf("a route without a Service parent got entries: %+v", none)
	}
}

func TestGRPCRouteParents(t *testing.T) {
	r := &gatewayv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "g"},
		Spec: gatewayv1.GRPCRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{serviceParent("web", nil)}},
			Rules: []gatewayv1.GRPCRouteRule{{BackendRefs: []gatewayv1.GRPCBackendRef{{BackendRef: gatewayv1.BackendRef{
				BackendObjectReference: gatewayv1.BackendObjectReference{Kind: ptrTo[gatewayv1.Kind]("Pod"), Name: "p"},
			}}}}},
		},
	}
	got := GRPCRouteParents(r, services(webService), metav1.Now())
	want := []cond{{"Accepted", "True", "Accepted", ""}, {"ResolvedRefs", "False", "InvalidKind", "rules[0].backendRefs[0]: Pod shop/p is not a Service"}}
	if len(got) != 1 || !slices.Equal(conds(got[0]), want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
}

func TestMergeParents(t *testing.T) {
	t0 := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	t1 := metav1.NewTime(t0.Add(time.Hour))
	lookup := services(webService)
	good := testRoute(nil, "web", serviceParent("web", ptrTo[int32](80)))
	foreign := gatewayv1.RouteParentStatus{
		ParentRef:      gatewayv1.ParentReference{Name: "ingress"},
		ControllerName: "example.com/gateway",
		Conditions:     []metav1.Condition{{Type: "Accepted", Status: "True", Reason: "Accepted", LastTransitionTime: t0}},
	}

	// First write: ours added after the other controller's entry.
	first, changed := MergeParents([]gatewayv1.RouteParentStatus{foreign}, HTTPRouteParents(good, lookup, t0))
	if !changed || len(first) != 2 || first[0].ControllerName != "example.com/gateway" || first[1].ControllerName != ControllerName {
		t.Fatalf("first merge: changed %v, %+v", changed, first)
	}

	// The same outcome computed later is no change: nothing to write.
	again, changed := MergeParents(first, HTTPRouteParents(good, lookup, t1))
	if changed || !equality.Semantic.DeepEqual(again, first) {
		t.Errorf("recomputing the same status changed it: %+v", again)
	}

	// A status change: new transition time for that condition only.
	bad := good.DeepCopy()
	bad.Spec.Rules[0].BackendRefs[0].Name = "missing"
	second, changed := MergeParents(first, HTTPRouteParents(bad, lookup, t1))
	if !changed {
		t.Fatal("ResolvedRefs turning False was not a change")
	}
	accepted, resolved := second[1].Conditions[0], second[1].Conditions[1]
	if !accepted.LastTransitionTime.Equal(&t0) || !resolved.LastTransitionTime.Equal(&t1) || resolved.Status != "False" {
		t.Errorf("after a ResolvedRefs change: Accepted at %v, ResolvedRefs %s at %v", accepted.LastTransitionTime, resolved.Status, resolved.LastTransitionTime)
	}
	if !equality.Semantic.DeepEqual(second[0], foreign) {
		t.Errorf("the other controller's entry changed: %+v", second[0])
	}

	// A message change with the same status is a change, at the old time.
	worse := bad.DeepCopy()
	worse.Spec.Rules[0].BackendRefs[0].Name = "gone"
	third, changed := MergeParents(second, HTTPRouteParents(worse, lookup, metav1.NewTime(t1.Add(time.Hour))))
	if !changed || !third[1].Conditions[1].LastTransitionTime.Equal(&t1) || third[1].Conditions[1].Message == second[1].Conditions[1].Message {
		t.Errorf("message change: changed %v, %+v", changed, third[1].Conditions[1])
	}

	// A new generation with the same outcome is written (observedGeneration).
	bumped := good.DeepCopy()
	bumped.Generation++
	if _, changed := MergeParents(first, HTTPRouteParents(bumped, lookup, t1)); !changed {
		t.Error("a new observedGeneration was not a change")
	}

	// The Service parentRef removed: our entry goes, the other stays.
	gone, changed := MergeParents(first, nil)
	if !changed || len(gone) != 1 || gone[0].ControllerName != "example.com/gateway" {
		t.Errorf("removing our parent: changed %v, %+v", changed, gone)
	}
	if out, changed := MergeParents([]gatewayv1.RouteParentStatus{foreign}, nil); changed || len(out) != 1 {
		t.Errorf("nothing of ours, nothing to add: changed %v, %+v", changed, out)
	}

	// Neither input is modified.
	before := first[1].DeepCopy()
	ours := HTTPRouteParents(bad, lookup, t1)
	oursBefore := ours[0].DeepCopy()
	_, _ = MergeParents(first, ours)
	if !equality.Semantic.DeepEqual(&first[1], before) || !equality.Semantic.DeepEqual(&ours[0], oursBefore) {
		t.Error("MergeParents modified its input")
	}
}

// TestTranslateNilCallbacks: no Services lookup and no Warn are allowed.
func TestTranslateNilCallbacks(t *testing.T) {
	svc := webService.DeepCopy()
	svc.Annotations = map[string]string{"retry.plexus.dev/limit": "x"}
	p := Translate(Input{ClusterDomain: "cluster.local", Service: svc, Port: 80,
		HTTPRoutes: []*gatewayv1.HTTPRoute{testRoute(nil, "web", serviceParent("web", nil))}})
	if p.Source != SourceRoutes || p.Routes[0].Rules[0].Backends[0].Failure != "Service shop/web not found" {
		t.Errorf("got %v", p)
	}
}
