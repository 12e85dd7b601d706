package destination_test

import (
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/control/destination"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/policy/authz"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
)

func m(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1_700_000_000, 0))}
}

// A route in namespace "evil" naming Server prod/web as its parent, with
// an AuthorizationPolicy in "evil" for everyone, must not attach: a
// plaintext client stays denied on prod/web's port, whose Server says
// deny and whose only policy allows one identity.
func TestCrossNamespaceRoute(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "prod", Name: "web-1", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{ServiceAccountName: "web", Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: 8080}}}}}}
	srv := &policyv1alpha1.Server{ObjectMeta: m("prod", "web"), Spec: policyv1alpha1.ServerSpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Port: intstr.FromInt32(8080), AccessPolicy: "deny"}}
	mt := &policyv1alpha1.MeshTLSAuthentication{ObjectMeta: m("prod", "a-only"), Spec: policyv1alpha1.MeshTLSAuthenticationSpec{Identities: []string{"spiffe://cluster.local/ns/prod/sa/a"}}}
	ap := &policyv1alpha1.AuthorizationPolicy{ObjectMeta: m("prod", "a"), Spec: policyv1alpha1.AuthorizationPolicySpec{
		TargetRef:                  policyv1alpha1.TargetRef{Group: policyv1alpha1.Group, Kind: "Server", Name: "web"},
		RequiredAuthenticationRefs: []policyv1alpha1.NamespacedTargetRef{{Group: policyv1alpha1.Group, Kind: "MeshTLSAuthentication", Name: "a-only"}}}}
	grp, kind, ns := gatewayv1.Group(policyv1alpha1.Group), gatewayv1.Kind("Server"), gatewayv1.Namespace("prod")
	evilRoute := &gatewayv1.HTTPRoute{ObjectMeta: m("evil", "steal"), Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{
		ParentRefs: []gatewayv1.ParentReference{{Group: &grp, Kind: &kind, Namespace: &ns, Name: "web"}}}}}
	evilAP := &policyv1alpha1.AuthorizationPolicy{ObjectMeta: m("evil", "all"), Spec: policyv1alpha1.AuthorizationPolicySpec{
		TargetRef:                  policyv1alpha1.TargetRef{Group: policyv1alpha1.GatewayGroup, Kind: "HTTPRoute", Name: "steal"},
		RequiredAuthenticationRefs: []policyv1alpha1.NamespacedTargetRef{}}}
	reads, err := destination.NewInboundObjects(srv, mt, ap, evilRoute, evilAP)
	if err != nil {
		t.Fatal(err)
	}
	p, err := destination.ComputeInboundPolicy(reads, destination.DefaultConfig(), pod, 8080)
	t.Logf("policy: %v (warnings %v)", p, err)
	pol, err := authz.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	c := authz.Client{Addr: netip.MustParseAddr("203.0.113.9")} // plaintext, anywhere
	d := pol.Request(&c, &routes.Request{Method: "POST", Target: "/anything"})
	if d.Allowed && !d.DryRun {
		t.Errorf("plaintext client allowed on prod/web by evil's route and policy: %+v", d)
	}
}
