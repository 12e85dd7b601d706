package healthcheck

import (
	"bytes"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/control/destination"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// podWeb is a meshed running pod shop/<name> (app=web) with port http
// 8080 and a readiness probe GET /ready on it.
func podWeb(name string) *corev1.Pod {
	always := corev1.ContainerRestartPolicyAlways
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: meshpod.ProxyContainerName, RestartPolicy: &always}},
			Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.0.7"},
	}
}

// servedWeb is pods and Server shop/web on their port http, accessPolicy
// deny.
func servedWeb(pods ...*corev1.Pod) []any {
	out := []any{&policyv1alpha1.Server{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"}, Spec: policyv1alpha1.ServerSpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}, Port: intstr.FromString("http")}}}
	for _, p := range pods {
		out = append(out, p)
	}
	return out
}

func ptr[T any](v T) *T { return &v }

// route is HTTPRoute shop/<name> whose parent is Server web, matching
// method and the exact path (the prefix path with method "").
func route(name, method, path string) *gatewayv1.HTTPRoute {
	m := gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchExact), Value: &path}}
	if method != "" {
		m.Method = ptr(gatewayv1.HTTPMethod(method))
	} else {
		m.Path.Type = ptr(gatewayv1.PathMatchPathPrefix)
	}
	return &gatewayv1.HTTPRoute{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: gatewayv1.HTTPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{
			Group: ptr(gatewayv1.Group(policyv1alpha1.Group)), Kind: ptr(gatewayv1.Kind(policyv1alpha1.ServerKind)), Name: "web"}}},
		Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{m}}},
	}}
}

// authzPolicy targets kind/name in shop requiring refs "Kind/name".
func authzPolicy(name, kind, target string, refs ...string) *policyv1alpha1.AuthorizationPolicy {
	groups := map[string]string{"Server": policyv1alpha1.Group, "HTTPRoute": policyv1alpha1.GatewayGroup, "NetworkAuthentication": policyv1alpha1.Group}
	ap := &policyv1alpha1.AuthorizationPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}, Spec: policyv1alpha1.AuthorizationPolicySpec{
		TargetRef: policyv1alpha1.TargetRef{Group: groups[kind], Kind: kind, Name: target}, RequiredAuthenticationRefs: []policyv1alpha1.NamespacedTargetRef{}}}
	for _, r := range refs {
		k, n, _ := strings.Cut(r, "/")
		ap.Spec.RequiredAuthenticationRefs = append(ap.Spec.RequiredAuthenticationRefs, policyv1alpha1.NamespacedTargetRef{Group: groups[k], Kind: k, Name: n})
	}
	return ap
}

// TestProbesThrough: configurations that leave the probes authorized pass
// without a warning (TestFailures has those that warn).
func TestProbesThrough(t *testing.T) {
	unmeshed := podWeb("plain")
	unmeshed.Spec.InitContainers = nil
	dry := authzPolicy("dry", "HTTPRoute", "ready")
	dry.Annotations = map[string]string{destination.AnnotationDryRun: "true"}
	for name, policy := range map[string][]any{
		"no Server": {podWeb("web-1")},
		"a Server without routes: the probe route":     servedWeb(podWeb("web-1")),
		"a prefix route: the probe route's exact path": append(servedWeb(podWeb("web-1")), route("all", "", "/")),
		"a route that authorizes unauthenticated clients from anywhere": append(servedWeb(podWeb("web-1")), route("ready", "GET", "/ready"),
			authzPolicy("open", "HTTPRoute", "ready")),
		"a dry-run policy lets it through":     append(servedWeb(podWeb("web-1")), route("ready", "GET", "/ready"), dry),
		"an unmeshed pod has no proxy to deny": append(servedWeb(unmeshed), route("ready", "GET", "/ready")),
		"a finished pod is left alone": append(servedWeb(func() *corev1.Pod {
			p := podWeb("job")
			p.Status.Phase = corev1.PodSucceeded
			return p
		}()), route("ready", "GET", "/ready")),
	} {
		t.Run(name, func(t *testing.T) {
			c := healthy(t)
			c.policy = policy
			var out bytes.Buffer
			if !Print(&out, c.run(Config{}), false) || strings.Contains(out.String(), "‼") {
				t.Errorf("want every check passed without warnings:\n%s", out.String())
			}
		})
	}
}
