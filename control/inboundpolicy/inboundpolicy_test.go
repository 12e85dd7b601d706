package inboundpolicy_test

import (
	"context"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/control/inboundpolicy/inboundpolicytest"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
)

func destinationDeployment(containers ...corev1.Container) *appsv1.Deployment {
	return inboundpolicytest.Destination("plexus-system", containers...)
}

func TestSettings(t *testing.T) {
	const defaults = "cluster.local(default) all-unauthenticated(default) 10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8(default)"
	for _, tc := range []struct {
		name   string
		objs   []any
		want   string // trust domain, policy, networks, each (from)
		source string
		err    string
	}{
		{name: "no Deployment: defaults", want: defaults, source: "Deployment plexus-system/plexus-destination not found: destination's defaults"},
		{name: "no flags: defaults", objs: []any{destinationDeployment(corev1.Container{Name: "destination", Args: []string{"destination", "--addr=:8086"}})},
			want: defaults, source: "Deployment plexus-system/plexus-destination"},
		{name: "every form of flag", objs: []any{destinationDeployment(
			corev1.Container{Name: "sidecar", Args: []string{"--trust-domain=wrong.example"}},
			corev1.Container{Name: "destination", Command: []string{"plexus-control"}, Args: []string{"destination", "-trust-domain=a.example", "--default-inbound-policy", "deny",
				"--cluster-networks=10.1.0.0/16, fd01::/16", "--trust-domain", "b.example"}})},
			want: "b.example(args) deny(args) 10.1.0.0/16, fd01::/16(args)", source: "Deployment plexus-system/plexus-destination"},
		{name: "first container when none is named destination", objs: []any{destinationDeployment(corev1.Container{Name: "main", Args: []string{"--default-inbound-policy=audit"}})},
			want: "cluster.local(default) audit(args) 10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8(default)", source: "Deployment plexus-system/plexus-destination"},
		{name: "bad networks", objs: []any{destinationDeployment(corev1.Container{Args: []string{"--cluster-networks=10.1.2.3/8"}})}, err: "host bits"},
		{name: "bad policy", objs: []any{destinationDeployment(corev1.Container{Args: []string{"--default-inbound-policy=open"}})}, err: `default inbound policy "open"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := inboundpolicytest.New(t, tc.objs...).Clients().Settings(context.Background(), "plexus-system")
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := strings.Join([]string{s.TrustDomain.Value + "(" + s.TrustDomain.From + ")", s.DefaultInboundPolicy.Value + "(" + s.DefaultInboundPolicy.From + ")",
				s.ClusterNetworks.Value + "(" + s.ClusterNetworks.From + ")"}, " ")
			if got != tc.want || s.Source != tc.source {
				t.Errorf("settings %s from %q\nwant %s from %q", got, s.Source, tc.want, tc.source)
			}
			if _, err := s.Config(); err != nil {
				t.Errorf("Config: %v", err)
			}
		})
	}
}

// TestSnapshot: CRDs that are not installed and objects that do not
// decode count as none, and say so.
func TestSnapshot(t *testing.T) {
	srv := &policyv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: policyv1alpha1.ServerSpec{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Port: intstr.FromInt32(8080)}}
	bad := inboundpolicytest.Unstructured(t, &policyv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "bad"}})
	// A value of the wrong type: unreadable (an unknown field alone would
	// not be, in a Server; see policyv1alpha1.Decode).
	bad.Object["spec"] = map[string]any{"podSelector": "all of them", "port": int64(8080)}
	cp := *srv
	other := &cp
	other.Namespace, other.Name = "a", "first"
	route := &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "r"}, Spec: gatewayv1.HTTPRouteSpec{CommonRouteSpec: gatewayv1.CommonRouteSpec{
		ParentRefs: []gatewayv1.ParentReference{{Group: ptr(gatewayv1.Group(policyv1alpha1.Group)), Kind: ptr(gatewayv1.Kind("Server")), Name: "web"}}}}}
	f := inboundpolicytest.New(t, srv, bad, other, route, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}})
	notFound := func(resource string) k8stesting.ReactionFunc {
		return func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, nil, apierrors.NewNotFound(policyv1alpha1.GroupVersion.WithResource(resource).GroupResource(), "")
		}
	}
	f.Dynamic.PrependReactor("list", "httplocalratelimitpolicies", notFound("httplocalratelimitpolicies"))
	f.Gateway.PrependReactor("list", "grpcroutes", notFound("grpcroutes"))
	s, err := f.Clients().Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, srv := range s.Servers {
		names = append(names, srv.Namespace+"/"+srv.Name)
	}
	if got := strings.Join(names, " "); got != "a/first shop/web" {
		t.Errorf("Servers %s, want a/first shop/web (the undecodable one left out)", got)
	}
	if rs := s.Reads.ServerHTTPRoutes("shop/web"); len(rs) != 1 || s.Reads.Namespace("shop") == nil {
		t.Errorf("routes of shop/web %v, namespace %v: want the route and the namespace", rs, s.Reads.Namespace("shop"))
	}
	notes := strings.Join(s.Notes, "\n")
	for _, want := range []string{
		"the httplocalratelimitpolicies.policy.plexus.dev CRD is not installed: HTTPLocalRateLimitPolicy objects count as none",
		"the Gateway API GRPCRoute CRD is not installed",
		"ignored, as destination ignores it: decoding Server shop/bad",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes\n%s\nwant %q", notes, want)
		}
	}
}

func ptr[T any](v T) *T { return &v }
