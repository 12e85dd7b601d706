package healthcheck

import (
	"bytes"
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/control/identitycmd"
	"github.com/plexus-mesh/plexus/control/inboundpolicy/inboundpolicytest"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// now is when the test certificates are made.
var now = time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)

// cluster holds the objects of a healthy installation; tests break one.
type cluster struct {
	deployments map[string]*appsv1.Deployment
	webhook     *admissionv1.MutatingWebhookConfiguration
	slice       *discoveryv1.EndpointSlice
	daemonSet   *appsv1.DaemonSet
	nodes       []*corev1.Node
	secret      *corev1.Secret
	anchors     *corev1.ConfigMap
	skew        time.Duration
	at          time.Time // when the checks run
	timeErr     error
	// policy are pods, policy.plexus.dev objects and routes.
	policy []any
	t      *testing.T
}

func issuerObjects(t *testing.T, lifetime time.Duration) (*corev1.Secret, *corev1.ConfigMap) {
	t.Helper()
	anchor, err := pki.NewAnchor(pki.CAOptions{TrustDomain: "cluster.local", Now: now})
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := pki.NewIntermediate(anchor, pki.CAOptions{TrustDomain: "cluster.local", Now: now, Lifetime: lifetime})
	if err != nil {
		t.Fatal(err)
	}
	s, err := identity.IssuerSecret(Namespace, identity.DefaultSecretName, []*x509.Certificate{anchor.Cert}, issuer)
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: identitycmd.AnchorsConfigMap},
		Data:       map[string]string{identitycmd.AnchorsBundleKey: string(pki.EncodeCerts(anchor.Cert))},
	}
	return s, cm
}

func healthy(t *testing.T) *cluster {
	c := &cluster{deployments: map[string]*appsv1.Deployment{}, t: t}
	for _, name := range controlPlaneDeployments {
		c.deployments[name] = &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
			Status: appsv1.DeploymentStatus{AvailableReplicas: 1, Conditions: []appsv1.DeploymentCondition{
				{Type: appsv1.DeploymentAvailable, Status: corev1.ConditionTrue},
			}},
		}
	}
	c.webhook = &admissionv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: InjectorName},
		Webhooks: []admissionv1.MutatingWebhook{
			{Name: "namespace.inject.plexus.dev", ClientConfig: admissionv1.WebhookClientConfig{CABundle: []byte("ca")}},
			{Name: "pod.inject.plexus.dev", ClientConfig: admissionv1.WebhookClientConfig{CABundle: []byte("ca")}},
		},
	}
	ready := true
	c.slice = &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: InjectorName + "-abc", Labels: map[string]string{discoveryv1.LabelServiceName: InjectorName}},
		Endpoints:  []discoveryv1.Endpoint{{Addresses: []string{"10.0.0.9"}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}
	c.daemonSet = &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: NodeDaemonSet},
		Status:     appsv1.DaemonSetStatus{DesiredNumberScheduled: 2, NumberReady: 2},
	}
	c.nodes = []*corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{{Key: "example.com/other", Effect: corev1.TaintEffectNoSchedule}}}},
	}
	c.secret, c.anchors = issuerObjects(t, 0)
	c.at = now
	return c
}

func (c *cluster) run(cfg Config) []Result {
	var objs []runtime.Object
	for _, d := range c.deployments {
		if d != nil {
			objs = append(objs, d)
		}
	}
	for _, o := range []runtime.Object{c.webhook, c.slice, c.daemonSet, c.secret, c.anchors} {
		if o != nil && !isNilPtr(o) {
			objs = append(objs, o)
		}
	}
	for _, n := range c.nodes {
		objs = append(objs, n)
	}
	all := make([]any, 0, len(objs)+len(c.policy))
	for _, o := range objs {
		all = append(all, o)
	}
	f := inboundpolicytest.New(c.t, append(all, c.policy...)...)
	ch := Checker{
		Client: f.Kube,
		Policy: f.Clients(),
		Now:    func() time.Time { return c.at },
		ServerTime: func(context.Context) (time.Time, time.Time, error) {
			return c.at.Add(c.skew), c.at, c.timeErr
		},
	}
	return ch.Run(context.Background(), cfg)
}

func isNilPtr(o runtime.Object) bool {
	switch v := o.(type) {
	case *admissionv1.MutatingWebhookConfiguration:
		return v == nil
	case *discoveryv1.EndpointSlice:
		return v == nil
	case *appsv1.DaemonSet:
		return v == nil
	case *corev1.Secret:
		return v == nil
	case *corev1.ConfigMap:
		return v == nil
	}
	return false
}

func TestHealthy(t *testing.T) {
	rs := healthy(t).run(Config{})
	if len(rs) != 10 {
		t.Errorf("%d results, want 10", len(rs))
	}
	var out bytes.Buffer
	if !Print(&out, rs, false) {
		t.Errorf("a healthy cluster fails:\n%s", out.String())
	}
	if strings.Contains(out.String(), "✘") || strings.Count(out.String(), "✔") != 10 || strings.Contains(out.String(), "\x1b[") {
		t.Errorf("output:\n%s", out.String())
	}
	out.Reset()
	Print(&out, rs, true)
	if !strings.Contains(out.String(), "\x1b[32m✔\x1b[0m") {
		t.Errorf("colour output has no green tick:\n%s", out.String())
	}
}

func TestFailures(t *testing.T) {
	for _, tc := range []struct {
		name        string
		breakIt     func(t *testing.T, c *cluster)
		cfg         Config
		check, want string // the failing check's name and detail, and its hint
		hint        string
		warnOnly    bool
	}{
		{"identity missing", func(t *testing.T, c *cluster) { delete(c.deployments, "plexus-identity") }, Config{},
			"plexus-identity is available", "not found", "plexusctl install", false},
		{"destination unavailable", func(t *testing.T, c *cluster) {
			d := c.deployments["plexus-destination"]
			d.Status.AvailableReplicas = 0
			d.Status.Conditions[0].Status = corev1.ConditionFalse
		}, Config{}, "plexus-destination is available", "0 of 1 replicas available", "describe deployment plexus-destination", false},
		{"webhook without CA", func(t *testing.T, c *cluster) { c.webhook.Webhooks[1].ClientConfig.CABundle = nil }, Config{},
			"has a CA bundle", "no caBundle on pod.inject.plexus.dev", "patches the CA in", false},
		{"webhook missing", func(t *testing.T, c *cluster) { c.webhook = nil }, Config{},
			"has a CA bundle", "not found", "plexusctl install", false},
		{"injector endpoints not ready", func(t *testing.T, c *cluster) {
			no := false
			c.slice.Endpoints[0].Conditions.Ready = &no
		}, Config{}, "has ready endpoints", "no ready endpoint", "fails closed", false},
		{"node agent removed", func(t *testing.T, c *cluster) { c.daemonSet = nil }, Config{},
			"ready on every node", "DaemonSet plexus-system/plexus-node not found", "--node-image-mode", false},
		{"node agent not ready on one node", func(t *testing.T, c *cluster) { c.daemonSet.Status.NumberReady = 1 }, Config{},
			"ready on every node", "1 of 2 node agents ready", "get pods", false},
		{"node still tainted", func(t *testing.T, c *cluster) {
			c.nodes[1].Spec.Taints = append(c.nodes[1].Spec.Taints, corev1.Taint{Key: podcontract.NodeTaintKey, Effect: corev1.TaintEffectNoSchedule})
		}, Config{NodeImageMode: true}, "no plexus.dev/cni-not-ready taint", "tainted: node-b", "removes the taint", false},
		{"issuer expired", func(t *testing.T, c *cluster) {
			// valid for an hour, checked a day later
			c.secret, c.anchors = issuerObjects(t, time.Hour)
			c.at = now.Add(24 * time.Hour)
		}, Config{}, "chains to the trust anchors", "expired at 2026-06-01T13:00:00Z", "create a new issuer", false},
		{"issuer from another anchor", func(t *testing.T, c *cluster) {
			_, other := issuerObjects(t, 0)
			c.anchors = other
		}, Config{}, "chains to the trust anchors", "does not chain to plexus-identity-trust-anchors", "re-create both together", false},
		{"issuer expires soon", func(t *testing.T, c *cluster) { c.secret, c.anchors = issuerObjects(t, 10*24*time.Hour) }, Config{},
			"chains to the trust anchors", "expires in 240h0m0s", "create a new issuer", true},
		{"clock far off", func(t *testing.T, c *cluster) { c.skew = -2 * time.Minute }, Config{},
			"agrees with the API server", "clocks differ by 1m59s", "NTP", false},
		{"clock a little off", func(t *testing.T, c *cluster) { c.skew = 10 * time.Second }, Config{},
			"agrees with the API server", "clocks differ by 9s", "NTP", true},
		{"API server unreachable for the time", func(t *testing.T, c *cluster) { c.timeErr = errors.New("connection refused") }, Config{},
			"agrees with the API server", "connection refused", "access to the cluster", false},
		{"a route takes a probe from the probe route", func(t *testing.T, c *cluster) {
			c.policy = append(servedWeb(podWeb("web-1")), route("ready", "GET", "/ready"))
		}, Config{}, "Servers let the HTTP probes of their pods through",
			"Server shop/web, pod shop/web-1 port 8080, GET /ready: denied on HTTPRoute shop/ready, which takes it before the probe route", "authorize that on the route", true},
		{"a route lets a probe through only from a network", func(t *testing.T, c *cluster) {
			c.policy = append(servedWeb(podWeb("web-1")), route("ready", "GET", "/ready"), authzPolicy("nodes", "HTTPRoute", "ready", "NetworkAuthentication/nodes"),
				&policyv1alpha1.NetworkAuthentication{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nodes"}, Spec: policyv1alpha1.NetworkAuthenticationSpec{
					Networks: []policyv1alpha1.Network{{CIDR: "10.0.0.0/8"}}}})
		}, Config{}, "Servers let the HTTP probes",
			"GET /ready: denied on HTTPRoute shop/ready, which takes it before the probe route; let through only from 10.0.0.0/8", "plexusctl authz pod/NAME", true},
		{"HTTPS probe on a Server that denies", func(t *testing.T, c *cluster) {
			p := podWeb("web-1")
			p.Spec.Containers[0].LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "healthz", Port: intstr.FromInt32(8080), Scheme: corev1.URISchemeHTTPS}}}
			c.policy = servedWeb(p)
		}, Config{}, "Servers let the HTTP probes",
			"Server shop/web, pod shop/web-1 port 8080, HTTPS GET /healthz: denied (TLS: the proxy does not see the request, the port's authorizations decide)", "an HTTPS probe needs", true},
		{"many pods: ten named, the rest counted", func(t *testing.T, c *cluster) {
			var pods []*corev1.Pod
			for i := range 12 {
				pods = append(pods, podWeb(fmt.Sprintf("web-%02d", i)))
			}
			c.policy = append(servedWeb(pods...), route("ready", "GET", "/ready"))
		}, Config{}, "Servers let the HTTP probes", "pod shop/web-09 port 8080, GET /ready: denied on HTTPRoute shop/ready, which takes it before the probe route; and 2 more", "", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := healthy(t)
			tc.breakIt(t, c)
			rs := c.run(tc.cfg)
			var out bytes.Buffer
			passed := Print(&out, rs, false)
			if passed != tc.warnOnly {
				t.Errorf("passed = %v, want %v:\n%s", passed, tc.warnOnly, out.String())
			}
			mark := "✘"
			if tc.warnOnly {
				mark = "‼"
			}
			var line, hint string
			lines := strings.Split(out.String(), "\n")
			for i, l := range lines {
				if strings.HasPrefix(l, mark) {
					if line != "" {
						t.Errorf("more than one check is not OK:\n%s", out.String())
					}
					line, hint = l, lines[i+1]
				}
			}
			if !strings.Contains(line, tc.check) || !strings.Contains(line, tc.want) {
				t.Errorf("want a %s line for %q with %q; got:\n%s", mark, tc.check, tc.want, out.String())
			}
			if !strings.HasPrefix(hint, "    hint: ") || !strings.Contains(hint, tc.hint) {
				t.Errorf("hint %q does not contain %q", hint, tc.hint)
			}
		})
	}
}

func TestNodeImageModeSkipsDaemonSet(t *testing.T) {
	c := healthy(t)
	c.daemonSet = nil
	rs := c.run(Config{NodeImageMode: true})
	if !Print(&bytes.Buffer{}, rs, false) {
		t.Error("node-image mode fails without the DaemonSet")
	}
	for _, r := range rs {
		if strings.Contains(r.Name, "DaemonSet") {
			t.Errorf("node-image mode ran %q", r.Name)
		}
	}
}

func TestStatusNamesAndSymbols(t *testing.T) {
	for _, c := range []struct {
		s            Status
		name, symbol string
	}{{OK, "ok", "✔"}, {Warn, "warn", "‼"}, {Fail, "fail", "✘"}, {Status(7), "fail", "✘"}, {Status(-1), "fail", "✘"}} {
		if c.s.String() != c.name || c.s.Symbol() != c.symbol {
			t.Errorf("Status(%d): %q %q, want %q %q", int(c.s), c.s.String(), c.s.Symbol(), c.name, c.symbol)
		}
	}
}
