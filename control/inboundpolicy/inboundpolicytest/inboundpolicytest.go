// Package inboundpolicytest builds inboundpolicy.Clients on client-go's
// fake clientsets, for tests of the commands that read inbound policies.
package inboundpolicytest

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gatewayfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"

	"github.com/plexus-mesh/plexus/control/inboundpolicy"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
)

// Fakes are the fake clientsets behind Clients, for reactors.
type Fakes struct {
	Kube    *fake.Clientset
	Dynamic *dynamicfake.FakeDynamicClient
	Gateway *gatewayfake.Clientset
}

// Clients returns f as inboundpolicy.Clients.
func (f Fakes) Clients() inboundpolicy.Clients {
	return inboundpolicy.Clients{Kube: f.Kube, Dynamic: f.Dynamic, Gateway: f.Gateway}
}

// policyKinds are the policy.plexus.dev resources and their kinds.
var policyKinds = map[schema.GroupVersionResource]string{
	policyv1alpha1.ServerResource:                   policyv1alpha1.ServerKind,
	policyv1alpha1.AuthorizationPolicyResource:      policyv1alpha1.AuthorizationPolicyKind,
	policyv1alpha1.MeshTLSAuthenticationResource:    policyv1alpha1.MeshTLSAuthenticationKind,
	policyv1alpha1.NetworkAuthenticationResource:    policyv1alpha1.NetworkAuthenticationKind,
	policyv1alpha1.HTTPLocalRateLimitPolicyResource: policyv1alpha1.HTTPLocalRateLimitPolicyKind,
}

// New puts objs where a cluster serves them: policy.plexus.dev objects
// (typed, or unstructured as they are stored) on the dynamic client,
// HTTPRoutes and GRPCRoutes on the Gateway API one, the rest on the
// typed one.
func New(t testing.TB, objs ...any) Fakes {
	t.Helper()
	listKinds := map[schema.GroupVersionResource]string{}
	for gvr, kind := range policyKinds {
		listKinds[gvr] = kind + "List"
	}
	var kube, dyn, gw []runtime.Object
	for _, o := range objs {
		switch o := o.(type) {
		case *unstructured.Unstructured:
			dyn = append(dyn, o)
		case *policyv1alpha1.Server, *policyv1alpha1.AuthorizationPolicy, *policyv1alpha1.MeshTLSAuthentication,
			*policyv1alpha1.NetworkAuthentication, *policyv1alpha1.HTTPLocalRateLimitPolicy:
			dyn = append(dyn, Unstructured(t, o))
		case *gatewayv1.HTTPRoute, *gatewayv1.GRPCRoute:
			gw = append(gw, o.(runtime.Object))
		case runtime.Object:
			kube = append(kube, o)
		default:
			t.Fatalf("%T is no object of a cluster", o)
		}
	}
	return Fakes{
		Kube:    fake.NewClientset(kube...),
		Dynamic: dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, dyn...),
		Gateway: gatewayfake.NewSimpleClientset(gw...),
	}
}

// Destination is destination's Deployment in namespace ns with
// containers.
func Destination(ns string, containers ...corev1.Container) *appsv1.Deployment {
	return &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: inboundpolicy.DestinationDeployment},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: containers}}}}
}

// Unstructured converts a policy.plexus.dev object to what the dynamic
// client stores.
func Unstructured(t testing.TB, obj any) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(policyv1alpha1.APIVersion)
	var kind string
	switch obj.(type) {
	case *policyv1alpha1.Server:
		kind = policyv1alpha1.ServerKind
	case *policyv1alpha1.AuthorizationPolicy:
		kind = policyv1alpha1.AuthorizationPolicyKind
	case *policyv1alpha1.MeshTLSAuthentication:
		kind = policyv1alpha1.MeshTLSAuthenticationKind
	case *policyv1alpha1.NetworkAuthentication:
		kind = policyv1alpha1.NetworkAuthenticationKind
	case *policyv1alpha1.HTTPLocalRateLimitPolicy:
		kind = policyv1alpha1.HTTPLocalRateLimitPolicyKind
	default:
		t.Fatalf("%T is not a policy.plexus.dev object", obj)
	}
	u.SetKind(kind)
	return u
}
