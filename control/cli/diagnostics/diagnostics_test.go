package diagnostics

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/control/cli/stat"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func ptr[T any](v T) *T { return &v }

func pod(name, sa string, meshed bool, phase corev1.PodPhase) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{ServiceAccountName: sa, Containers: []corev1.Container{{Name: "app"}}},
		Status:     corev1.PodStatus{Phase: phase},
	}
	if meshed {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "plexus-proxy"})
	}
	return p
}

func TestParseTarget(t *testing.T) {
	for _, tc := range []struct {
		args []string
		kind Kind
		name string
		err  string
	}{
		{[]string{"po/web-1"}, Pod, "web-1", ""},
		{[]string{"pod/web-1"}, Pod, "web-1", ""},
		{[]string{"pod", "web-1"}, Pod, "web-1", ""},
		{[]string{"deploy/web"}, Deployment, "web", ""},
		{[]string{"deployment", "web"}, Deployment, "web", ""},
		{[]string{"svc/web"}, "", "", `unknown kind "svc"`},
		{[]string{"pod"}, "", "", "want one object"},
		{nil, "", "", "want one object"},
		{[]string{"pod/"}, "", "", "bad name"},
	} {
		kind, name, err := ParseTarget(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want %q", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || kind != tc.kind || name != tc.name {
			t.Errorf("%q: %q %q %v, want %q %q", tc.args, kind, name, err, tc.kind, tc.name)
		}
	}
}

// fakeAPI is an API server with the pods and deployments of shop, whose
// pod proxy to port 4191 answers /metrics with metrics[pod] (404 without).
func fakeAPI(t *testing.T, metrics map[string]string, objs ...any) kubernetes.Interface {
	t.Helper()
	pods := &corev1.PodList{}
	deps := &appsv1.DeploymentList{}
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Pod:
			pods.Items = append(pods.Items, *o)
		case *appsv1.Deployment:
			deps.Items = append(deps.Items, *o)
		}
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var v any
		switch p := r.URL.Path; {
		case p == "/api/v1/namespaces/shop/pods":
			v = pods
		case p == "/apis/apps/v1/namespaces/shop/deployments":
			v = deps
		case strings.HasPrefix(p, "/api/v1/namespaces/shop/pods/http:") && strings.HasSuffix(p, ":4191/proxy/metrics"):
			name := strings.TrimSuffix(strings.TrimPrefix(p, "/api/v1/namespaces/shop/pods/http:"), ":4191/proxy/metrics")
			text, ok := metrics[name]
			if !ok {
				http.Error(w, "no such pod proxy", http.StatusServiceUnavailable)
				return
			}
			w.Write([]byte(text))
			return
		default:
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(v)
	}))
	t.Cleanup(srv.Close)
	client, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func TestProxyMetrics(t *testing.T) {
	web := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
	plain := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "plain"},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "plain"}}},
	}
	bare := pod("bare", "", false, corev1.PodRunning)
	bare.Labels = map[string]string{"app": "plain"}
	metrics := map[string]string{
		"web-b": "# TYPE request_total counter\nrequest_total{direction=\"inbound\"} 7\n",
		"web-a": "# TYPE request_total counter\nrequest_total{direction=\"inbound\"} 3\n",
	}
	client := fakeAPI(t, metrics, web, plain, bare,
		pod("web-b", "web", true, corev1.PodRunning),
		pod("web-a", "web", true, corev1.PodRunning),
		pod("web-c", "web", true, corev1.PodPending),
		pod("web-gone", "web", true, corev1.PodRunning))
	m := ProxyMetrics{Stat: stat.Stat{Client: client, Scrape: stat.ProxyScraper(client)}}
	run := func(kind Kind, name string) (string, error) {
		var out bytes.Buffer
		err := m.Run(context.Background(), &out, kind, "shop", name)
		return out.String(), err
	}

	out, err := run(Pod, "web-a")
	if err != nil || out != metrics["web-a"] {
		t.Errorf("pod web-a: %q %v, want its raw metrics", out, err)
	}

	out, err = run(Deployment, "web")
	checkGolden(t, "proxy-metrics-deploy-web.golden", out)
	if err == nil || !strings.Contains(err.Error(), "shop/web-gone:4191/metrics") || strings.Contains(err.Error(), "web-a") {
		t.Errorf("deploy/web: error %v, want one naming web-gone only", err)
	}

	for _, tc := range []struct {
		kind      Kind
		name, err string
	}{
		{Pod, "bare", "pod shop/bare is not meshed: it has no plexus-proxy container"},
		{Pod, "nope", "pod shop/nope not found (or not running)"},
		{Pod, "web-c", "pod shop/web-c: no meshed pod is running"},
		{Deployment, "nope", "deployment shop/nope not found"},
		{Deployment, "plain", "deployment shop/plain is not meshed: none of its 1 pods has a plexus-proxy container"},
	} {
		if out, err := run(tc.kind, tc.name); err == nil || err.Error() != tc.err || out != "" {
			t.Errorf("%s/%s: %q, error %v; want nothing and %q", tc.kind, tc.name, out, err, tc.err)
		}
	}
}

func TestParseAuthority(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Authority
		err  string
	}{
		{"web.shop:80", Authority{"web", "shop", 80}, ""},
		{"web.shop.svc.cluster.local:8080", Authority{"web", "shop", 8080}, ""},
		{"Web.Shop.svc.cluster.local.:80", Authority{"web", "shop", 80}, ""},
		{"web.shop", Authority{}, "want SVC.NS:PORT"},
		{"web:80", Authority{}, "want SVC.NS:PORT or SVC.NS.svc.cluster.local:PORT"},
		{"web.shop.svc.example.org:80", Authority{}, "want SVC.NS:PORT or"},
		{"web.shop:0", Authority{}, "not a number in 1-65535"},
		{"web.shop:http", Authority{}, "not a number in 1-65535"},
		{"10.0.0.1:80", Authority{}, "want SVC.NS:PORT or"},
		{".shop:80", Authority{}, "want SVC.NS:PORT or"},
	} {
		got, err := ParseAuthority(tc.in, "cluster.local")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: %v, want error %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%q: %+v %v, want %+v", tc.in, got, err, tc.want)
		}
	}
}

func slice(name string, port int32, eps ...discoveryv1.Endpoint) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(port)}},
		Endpoints:   eps,
	}
}

func ep(ip, pod string, ready, serving, terminating *bool) discoveryv1.Endpoint {
	e := discoveryv1.Endpoint{
		Addresses:  []string{ip},
		Conditions: discoveryv1.EndpointConditions{Ready: ready, Serving: serving, Terminating: terminating},
		Zone:       ptr("zone-a"),
		NodeName:   ptr("node-1"),
	}
	if pod != "" {
		e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: pod}
	}
	return e
}

func shopEndpoints() *fake.Clientset {
	yes, no := ptr(true), ptr(false)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}},
	}
	ext := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "ext"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "example.org"},
	}
	opaque := pod("web-db", "", true, corev1.PodRunning)
	opaque.Annotations = map[string]string{"config.plexus.dev/opaque-ports": "8080"}
	other := slice("web-other", 9090, ep("10.0.0.99", "", nil, nil, nil))
	other.Ports[0].Name = ptr("metrics")
	return fake.NewClientset(svc, ext,
		pod("web-a", "web", true, corev1.PodRunning),
		pod("web-b", "web", true, corev1.PodRunning),
		pod("web-plain", "web", false, corev1.PodRunning),
		pod("web-done", "web", true, corev1.PodSucceeded),
		opaque,
		slice("web-1", 8080,
			ep("10.0.0.2", "web-b", yes, yes, no),
			ep("10.0.0.1", "web-a", nil, nil, nil),
			ep("10.0.0.3", "web-plain", no, yes, yes),
			ep("10.0.0.4", "web-done", yes, yes, no),
			ep("10.0.0.5", "web-gone", yes, yes, no),
			ep("10.0.0.6", "web-db", yes, yes, no)),
		slice("web-2", 8080,
			ep("10.0.0.7", "web-a", no, no, no),
			ep("192.0.2.1", "", yes, yes, no)),
		other)
}

func TestEndpoints(t *testing.T) {
	e := Endpoints{Client: shopEndpoints(), TrustDomain: "cluster.local", ClusterDomain: "cluster.local"}
	r, err := e.Run(context.Background(), Authority{"web", "shop", 80})
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"table", "wide", "json", "yaml"} {
		var out bytes.Buffer
		f := format
		if f == "table" {
			f = stat.FormatTable
		}
		if err := RenderEndpoints(&out, r, f); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, "endpoints-web."+format+".golden", out.String())
	}

	for _, tc := range []struct {
		a   Authority
		err string
	}{
		{Authority{"nope", "shop", 80}, "service shop/nope not found"},
		{Authority{"web", "shop", 53}, "service shop/web has no TCP port 53 (it has: 80); destination gives no endpoints"},
		{Authority{"ext", "shop", 80}, "service shop/ext is of type ExternalName (example.org): destination does not resolve it, proxies use DNS"},
	} {
		if _, err := e.Run(context.Background(), tc.a); err == nil || err.Error() != tc.err {
			t.Errorf("%+v: %v, want %q", tc.a, err, tc.err)
		}
	}
}

func TestEndpointsNone(t *testing.T) {
	client := fake.NewClientset(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	})
	r, err := Endpoints{Client: client, TrustDomain: "example.org", ClusterDomain: "cluster.local"}.Run(context.Background(), Authority{"web", "shop", 80})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := RenderEndpoints(&out, r, ""); err != nil {
		t.Fatal(err)
	}
	if want := "web.shop.svc.cluster.local:80: 0 endpoints published of 0 listed (trust domain example.org)\n"; out.String() != want {
		t.Errorf("got %q, want %q", out.String(), want)
	}
}

func checkGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it); got:\n%s", path, got)
	}
}
