package vizcli

import (
	"bytes"
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/fake"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/control/cli/kinds"
	"github.com/plexus-mesh/plexus/control/destination"
	"github.com/plexus-mesh/plexus/control/inboundpolicy"
	"github.com/plexus-mesh/plexus/control/inboundpolicy/inboundpolicytest"
	"github.com/plexus-mesh/plexus/deploy"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/testsupport/goldentest"
	"github.com/plexus-mesh/plexus/viz/viznames"
)

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		needName bool
		want     Target
		err      string
	}{
		{args: []string{"deploy/web"}, want: Target{Deployments, "web"}},
		{args: []string{"deploy", "web"}, want: Target{Deployments, "web"}},
		{args: []string{"Deployments/web"}, want: Target{Deployments, "web"}},
		{args: []string{"po/web-1"}, want: Target{Pods, "web-1"}},
		{args: []string{"ns/shop"}, want: Target{Namespaces, "shop"}},
		{args: []string{"sts", "db"}, want: Target{StatefulSets, "db"}},
		{args: []string{"cronjob/nightly"}, want: Target{CronJobs, "nightly"}},
		{args: []string{"svc/books"}, want: Target{Services, "books"}},
		{args: []string{"deploy"}, want: Target{Deployments, ""}},
		{args: []string{"deploy"}, needName: true, err: `"deploy" names no object: want deploy/NAME`},
		{args: []string{"deploy/"}, err: `bad name ""`},
		{args: []string{"deploy/a/b"}, err: `bad name "a/b"`},
		{args: []string{"deploy/a", "b"}, err: "want one object"},
		{args: nil, err: "want one object"},
		{args: []string{"widget/a"}, err: `unknown kind "widget": want ns, po, deploy`},
	} {
		got, err := ParseTarget(tc.args, tc.needName)
		switch {
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("ParseTarget(%q): %v, want error %q", tc.args, err, tc.err)
		case tc.err == "" && (err != nil || got != tc.want):
			t.Errorf("ParseTarget(%q) = %v, %v; want %v", tc.args, got, err, tc.want)
		}
	}
	if !Tappable(Deployments) || !Tappable(Namespaces) || Tappable(Kind("nodes")) {
		t.Error("Tappable: want deployments and namespaces, not nodes")
	}
	if Deployments.Short() != "deploy" || Deployments.Object() != "Deployment" || kinds.OfObject("StatefulSet") != StatefulSets {
		t.Error("names of kinds")
	}
}

// fakeViz is a small deploy/plexus-viz.
var fakeViz = fstest.MapFS{
	"plexus-viz/namespace.yaml": {Data: []byte("# the namespace\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: plexus-viz\n")},
	"plexus-viz/tap.yaml": {Data: []byte(`# tap
apiVersion: v1
kind: ServiceAccount
metadata: {name: plexus-tap, namespace: plexus-viz}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: plexus-viz-tap-service}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: plexus-viz-tap-auth-reader, namespace: kube-system}
---
# only a comment
---
apiVersion: apiregistration.k8s.io/v1
kind: APIService
metadata: {name: v1alpha1.tap.plexus.dev}
spec: {group: tap.plexus.dev, version: v1alpha1, service: {name: plexus-tap, namespace: plexus-viz, port: 443}}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: plexus-tap, namespace: plexus-viz}
`)},
	"plexus-viz/kustomization.yaml": {Data: []byte("resources: [namespace.yaml]\n")},
	"plexus-viz/grafana/x.json":     {Data: []byte("{}")},
}

func TestInstallOrderAndUninstall(t *testing.T) {
	var out bytes.Buffer
	if err := (Renderer{Manifests: fakeViz}).Install(&out); err != nil {
		t.Fatal(err)
	}
	goldentest.Golden(t, "install.yaml", out.Bytes())
	out.Reset()
	if err := (Renderer{Manifests: fakeViz}).Uninstall(&out); err != nil {
		t.Fatal(err)
	}
	goldentest.Golden(t, "uninstall.yaml", out.Bytes())

	bad := fstest.MapFS{"plexus-viz/a.yaml": {Data: []byte("apiVersion: v1\nmetadata: {name: x}\n")}}
	if err := (Renderer{Manifests: bad}).Install(&out); err == nil || !strings.Contains(err.Error(), "a.yaml document 1 has no kind") {
		t.Errorf("a document without kind: %v", err)
	}
	if err := (Renderer{Manifests: fstest.MapFS{}}).Install(&out); err == nil || !strings.Contains(err.Error(), "no manifests in plexus-viz") {
		t.Errorf("no manifests: %v", err)
	}
}

// decodeAll decodes a YAML stream into unstructured objects.
func decodeAll(t *testing.T, b []byte) []*unstructured.Unstructured {
	t.Helper()
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			break
		}
		if len(m) > 0 {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
	return out
}

// TestInstallRealManifests renders the embedded deploy/plexus-viz: every
// document decodes, names its namespace where namespaced, the APIService
// comes after the tap Deployment and Service and carries no caBundle
// (the tap service writes it).
func TestInstallRealManifests(t *testing.T) {
	var out bytes.Buffer
	if err := (Renderer{Manifests: deploy.Manifests}).Install(&out); err != nil {
		t.Fatal(err)
	}
	objs := decodeAll(t, out.Bytes())
	if len(objs) == 0 || objs[0].GetKind() != "Namespace" || objs[0].GetName() != viznames.Namespace {
		t.Fatalf("first object %v, want Namespace %s", objs[0], viznames.Namespace)
	}
	seen := map[string]int{}
	for i, o := range objs {
		seen[o.GetKind()+"/"+o.GetName()] = i
		if o.GetKind() == "APIService" {
			if _, ok, _ := unstructured.NestedFieldNoCopy(o.Object, "spec", "caBundle"); ok {
				t.Error("the APIService has a caBundle: the tap service keeps it")
			}
		}
	}
	api, ok := seen["APIService/"+viznames.APIService]
	if !ok {
		t.Fatalf("no APIService %s among %v", viznames.APIService, seen)
	}
	for _, dep := range []string{"Deployment/" + viznames.TapDeployment, "Service/" + viznames.TapDeployment} {
		if i, ok := seen[dep]; !ok || i > api {
			t.Errorf("%s at %d, want it before the APIService (%d)", dep, i, api)
		}
	}
	out.Reset()
	if err := (Renderer{Manifests: deploy.Manifests}).Uninstall(&out); err != nil {
		t.Fatal(err)
	}
	del := decodeAll(t, out.Bytes())
	if del[0].GetKind() != "APIService" || del[1].GetKind() != "Namespace" {
		t.Errorf("uninstall starts with %s, %s; want the APIService, then the Namespace", del[0].GetKind(), del[1].GetKind())
	}
	for _, o := range del[2:] {
		if o.GetNamespace() == viznames.Namespace {
			t.Errorf("%s %s is in %s: deleted with the namespace", o.GetKind(), o.GetName(), viznames.Namespace)
		}
	}
}

// TestInstallTrustDomain: the mesh's trust domain reaches the tap
// service's flag, and only that flag changes.
func TestInstallTrustDomain(t *testing.T) {
	var def, td bytes.Buffer
	if err := (Renderer{Manifests: deploy.Manifests}).Install(&def); err != nil {
		t.Fatal(err)
	}
	if err := (Renderer{Manifests: deploy.Manifests, TrustDomain: "b.example"}).Install(&td); err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(def.String(), "--trust-domain=cluster.local", "--trust-domain=b.example")
	if want == def.String() {
		t.Fatal("the manifests have no --trust-domain=cluster.local")
	}
	if td.String() != want {
		t.Errorf("with trust domain b.example:\n%s\nwant the default manifests with the tap's --trust-domain=b.example", td.String())
	}
}

// TestAllowScrapes decodes the objects strictly into the policy types and
// evaluates the policy destination computes from them for a meshed
// pod's admin port under a deny default: GET /metrics from Prometheus's
// address is allowed, everything else is not.
func TestAllowScrapes(t *testing.T) {
	var out bytes.Buffer
	cfg := ScrapeConfig{Namespace: "shop", Networks: DefaultScrapeNetworks}
	if err := AllowScrapes(&out, cfg); err != nil {
		t.Fatal(err)
	}
	goldentest.Golden(t, "allow-scrapes.yaml", out.Bytes())

	objs := []any{&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}}
	for _, u := range decodeAll(t, out.Bytes()) {
		if u.GetNamespace() != "shop" {
			t.Errorf("%s %s in namespace %q", u.GetKind(), u.GetName(), u.GetNamespace())
		}
		var into any
		switch u.GetKind() {
		case policyv1alpha1.ServerKind:
			into = &policyv1alpha1.Server{}
		case policyv1alpha1.AuthorizationPolicyKind:
			into = &policyv1alpha1.AuthorizationPolicy{}
		case policyv1alpha1.NetworkAuthenticationKind:
			into = &policyv1alpha1.NetworkAuthentication{}
		case policyv1alpha1.HTTPRouteKind:
			r := &gatewayv1.HTTPRoute{}
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, r, true); err != nil {
				t.Fatalf("HTTPRoute: %v", err)
			}
			objs = append(objs, r)
			continue
		default:
			t.Fatalf("unexpected kind %s", u.GetKind())
		}
		// Strictly, an unknown field an error (Decode lets a Server have one).
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, true); err != nil {
			t.Fatal(err)
		}
		if err := policyv1alpha1.Decode(u, into); err != nil {
			t.Fatal(err)
		}
		objs = append(objs, u)
	}
	if len(objs) != 5 {
		t.Fatalf("%d objects, want a Server, an HTTPRoute, an AuthorizationPolicy and a NetworkAuthentication", len(objs)-1)
	}

	f := inboundpolicytest.New(t, objs...)
	snap, err := f.Clients().Snapshot(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Notes) > 0 {
		t.Errorf("notes: %v", snap.Notes)
	}
	dcfg := destination.DefaultConfig()
	dcfg.DefaultInboundPolicy = policyv1alpha1.Deny
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "plexus-proxy",
			LivenessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intOrString(viznames.AdminPort)}}}}}},
	}
	pol, warnings, err := snap.Policy(dcfg, pod, viznames.AdminPort)
	if err != nil || len(warnings) > 0 {
		t.Fatalf("policy: %v, warnings %v", err, warnings)
	}
	prom := inboundpolicy.Client{Addr: netip.MustParseAddr("10.42.0.7")}
	for _, tc := range []struct {
		method, target string
		client         inboundpolicy.Client
		want           string
	}{
		{"GET", "/metrics", prom, inboundpolicy.Allowed},
		{"GET", "/metrics", inboundpolicy.Client{Addr: netip.MustParseAddr("fd00::7")}, inboundpolicy.Allowed},
		{"POST", "/metrics", prom, inboundpolicy.NoRoute},
		{"GET", "/shutdown", prom, inboundpolicy.NoRoute},
		{"GET", "/live", prom, inboundpolicy.Allowed}, // the probe route
	} {
		vs, err := inboundpolicy.Request(pol, routes.Request{Method: tc.method, Target: tc.target}, tc.client)
		if err != nil {
			t.Fatal(err)
		}
		if got := vs[len(vs)-1].Result; got != tc.want {
			t.Errorf("%s %s from %s: %s, want %s", tc.method, tc.target, tc.client.Addr, got, tc.want)
		}
	}

	// Narrowed networks leave out other addresses.
	out.Reset()
	if err := AllowScrapes(&out, ScrapeConfig{Namespace: "shop", Networks: []netip.Prefix{netip.MustParsePrefix("10.42.0.0/16")}}); err != nil {
		t.Fatal(err)
	}
	var na policyv1alpha1.NetworkAuthentication
	for _, u := range decodeAll(t, out.Bytes()) {
		if u.GetKind() == policyv1alpha1.NetworkAuthenticationKind {
			if err := policyv1alpha1.Decode(u, &na); err != nil {
				t.Fatal(err)
			}
		}
	}
	if len(na.Spec.Networks) != 1 || na.Spec.Networks[0].CIDR != "10.42.0.0/16" {
		t.Errorf("networks %+v, want 10.42.0.0/16", na.Spec.Networks)
	}

	for _, bad := range []ScrapeConfig{{Networks: DefaultScrapeNetworks}, {Namespace: "x"}, {Namespace: "x", Networks: []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}}} {
		if err := AllowScrapes(&out, bad); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}

func TestGoldenIsYAML(t *testing.T) {
	for _, f := range []string{"install.yaml", "uninstall.yaml"} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "---\n") {
			var m map[string]any
			if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
				t.Errorf("%s: %v", f, err)
			}
		}
	}
}

func intOrString(p int) intstr.IntOrString { return intstr.FromInt32(int32(p)) }

func TestSelect(t *testing.T) {
	kube := fake.NewClientset(
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", Labels: map[string]string{"tier": "front"}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "books", Labels: map[string]string{"tier": "back"}}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "api", Labels: map[string]string{"tier": "front"}}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{"mesh": "yes"}}},
	)
	ctx := context.Background()
	got, err := Select(ctx, kube, Deployments, "", "tier=front")
	if err != nil || len(got) != 2 || got[0] != (Object{"other", "api"}) || got[1] != (Object{"shop", "web"}) {
		t.Errorf("front deployments everywhere: %v, %v", got, err)
	}
	got, err = Select(ctx, kube, Deployments, "shop", "tier!=front")
	if err != nil || len(got) != 1 || got[0].Name != "books" {
		t.Errorf("back deployments in shop: %v, %v", got, err)
	}
	got, err = Select(ctx, kube, Namespaces, "", "mesh=yes")
	if err != nil || len(got) != 1 || got[0] != (Object{"", "shop"}) {
		t.Errorf("namespaces: %v, %v", got, err)
	}
	for _, k := range []Kind{Pods, Services, StatefulSets, DaemonSets, ReplicaSets, Jobs, CronJobs} {
		if got, err := Select(ctx, kube, k, "shop", ""); err != nil || len(got) != 0 {
			t.Errorf("%s: %v, %v", k, got, err)
		}
	}
	if _, err := Select(ctx, kube, Deployments, "", "a in (b"); err == nil {
		t.Error("a bad selector: no error")
	}
}
