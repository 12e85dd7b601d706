package outboundpolicy

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// TestCrossNamespaceBackends: without ReferenceGrants a backend is
// permitted in the route's namespace or when it is the parent Service
// being translated, whatever else the route attaches to.
func TestCrossNamespaceBackends(t *testing.T) {
	svc := func(ns, name string) *corev1.Service {
		return &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}}}
	}
	web, ledger, local, admin := svc("shop", "web"), svc("billing", "ledger"), svc("frontend", "local"), svc("shop", "admin")
	all := services(web, ledger, local, admin)
	parentIn := func(ns, name string) gatewayv1.ParentReference {
		ref := serviceParent(name, ptrTo[int32](80))
		ref.Namespace = ptrTo(gatewayv1.Namespace(ns))
		return ref
	}
	for _, tc := range []struct {
		name      string
		routeNS   string
		parents   []gatewayv1.ParentReference
		parent    *corev1.Service // translated for
		backend   *corev1.Service
		permitted bool
	}{
		{"producer, own namespace", "shop", []gatewayv1.ParentReference{parentIn("shop", "web")}, web, admin, true},
		{"producer, third namespace", "shop", []gatewayv1.ParentReference{parentIn("shop", "web")}, web, ledger, false},
		{"consumer, its parent", "frontend", []gatewayv1.ParentReference{parentIn("shop", "web")}, web, web, true},
		{"consumer, own namespace", "frontend", []gatewayv1.ParentReference{parentIn("shop", "web")}, web, local, true},
		{"consumer, the parent's neighbour", "frontend", []gatewayv1.ParentReference{parentIn("shop", "web")}, web, admin, false},
		{"two parents, the other one", "shop", []gatewayv1.ParentReference{parentIn("shop", "web"), parentIn("billing", "ledger")}, web, ledger, false},
		{"two parents, this one", "shop", []gatewayv1.ParentReference{parentIn("shop", "web"), parentIn("billing", "ledger")}, ledger, ledger, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := testRoute(nil, tc.backend.Name, tc.parents...)
			r.Namespace = tc.routeNS
			r.Spec.Rules[0].BackendRefs[0].Namespace = ptrTo(gatewayv1.Namespace(tc.backend.Namespace))
			policy := Translate(Input{ClusterDomain: "cluster.local", ClientNamespace: tc.routeNS, Service: tc.parent, Port: 80, HTTPRoutes: []*gatewayv1.HTTPRoute{r}, Services: all})
			if len(policy.Routes) != 1 || policy.Routes[0].Ref.GetName() != "r" {
				t.Fatalf("routes %v, want the route r", policy.Routes)
			}
			b := policy.Routes[0].Rules[0].Backends[0]
			if permitted := b.Failure == ""; permitted != tc.permitted {
				t.Fatalf("backend %s/%s: failure %q, want permitted %v", tc.backend.Namespace, tc.backend.Name, b.Failure, tc.permitted)
			}
			if !tc.permitted && (b.Authority != "" || !strings.Contains(b.Failure, "cross-namespace backends need a ReferenceGrant")) {
				t.Errorf("refused backend: authority %q, failure %q", b.Authority, b.Failure)
			}
			var status gatewayv1.RouteParentStatus
			for _, s := range HTTPRouteParents(r, all, testNow) {
				if parentNamespace(s.ParentRef, r.Namespace) == tc.parent.Namespace && string(s.ParentRef.Name) == tc.parent.Name {
					status = s
				}
			}
			want := []cond{{"Accepted", "True", "Accepted", ""}, {"ResolvedRefs", "True", "ResolvedRefs", ""}}
			if !tc.permitted {
				want[1] = cond{"ResolvedRefs", "False", "RefNotPermitted", "rules[0].backendRefs[0]: " + b.Failure}
			}
			if got := conds(status); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
				t.Errorf("status of parent %s/%s: %+v, want %+v", tc.parent.Namespace, tc.parent.Name, got, want)
			}
		})
	}
}
