package diagnostics

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/control/destination/destinationtest"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
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

// shopObjects are the Service shop/web (and an ExternalName one), its
// pods and EndpointSlices: ready, serving, terminating, not ready, of a
// pod gone or finished, opaque, without a pod, and on another port.
func shopObjects() []runtime.Object {
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
	owned := pod("web-b", "web", true, corev1.PodRunning)
	owned.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7c9d", Controller: ptr(true)}}
	owned.Labels["pod-template-hash"] = "7c9d"
	other := slice("web-other", 9090, ep("10.0.0.99", "", nil, nil, nil))
	other.Ports[0].Name = ptr("metrics")
	return []runtime.Object{svc, ext,
		pod("web-a", "web", true, corev1.PodRunning),
		owned,
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
		other}
}

func shopEndpoints() *fake.Clientset { return fake.NewClientset(shopObjects()...) }

// destinationPod is a ready destination pod in plexus-system.
func destinationPod(name string, ready bool, grpcPort int32) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "plexus-system", Name: name, Labels: map[string]string{"app.kubernetes.io/name": "plexus-destination"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "destination", Ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: grpcPort}, {Name: "admin", ContainerPort: 9996}}}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}},
	}
	if ready {
		p.Status.Conditions[0].Status = corev1.ConditionTrue
	}
	return p
}

func anchorsConfigMap(pem []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "plexus-system", Name: TrustAnchorsConfigMap}, Data: map[string]string{TrustAnchorsKey: string(pem)}}
}

// askDestination is Endpoints asking a real destination server
// (destinationtest, TLS, the caller interceptor) of the shop cluster:
// the API holds the shop objects, destination's pods (the ready one,
// plexus-destination-b, serving gRPC on 8086) and the anchors ConfigMap;
// Dial reaches the server on loopback, as a port-forward does.
func askDestination(t *testing.T, trustDomain string) (Endpoints, *destinationtest.Server) {
	t.Helper()
	dst := destinationtest.Start(t, trustDomain, nil, shopObjects()...)
	objs := append(shopObjects(), destinationPod("plexus-destination-a", false, 8086), destinationPod("plexus-destination-b", true, 8086),
		destinationPod("plexus-destination-c", true, 8087), anchorsConfigMap(dst.PKI.AnchorsPEM()))
	e := Endpoints{
		Client: fake.NewClientset(objs...),
		Dial: func(ctx context.Context, ns, pod string, port uint16) (net.Conn, error) {
			if ns != "plexus-system" || pod != "plexus-destination-b" || port != 8086 {
				return nil, fmt.Errorf("dialed %s/%s:%d, want plexus-system/plexus-destination-b:8086", ns, pod, port)
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", dst.Addr)
		},
		ControlNamespace: "plexus-system", TrustDomain: trustDomain, ClusterDomain: "cluster.local",
	}
	return e, dst
}

// TestEndpoints asks a real destination server, through a loopback
// connection without a client certificate, and renders its answer; with
// Compare, the EndpointSlices computed by destination's rules agree.
func TestEndpoints(t *testing.T) {
	e, dst := askDestination(t, "cluster.local")
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
	if got := openStreams(t, dst); got != 0 {
		t.Errorf("destination still has %v streams open after Run returned", got)
	}

	e.Compare = true
	r, err = e.Run(context.Background(), Authority{"web", "shop", 80})
	if err != nil {
		t.Fatal(err)
	}
	if c := r.Comparison; c == nil || c.Error != "" || len(c.OnlyDestination)+len(c.OnlySlices) > 0 {
		t.Errorf("destination and the slices disagree: %+v", c)
	}
	for _, format := range []string{"table", "wide", "json"} {
		var out bytes.Buffer
		f := format
		if f == "table" {
			f = stat.FormatTable
		}
		if err := RenderEndpoints(&out, r, f); err != nil {
			t.Fatal(err)
		}
		checkGolden(t, "endpoints-web-compare."+format+".golden", out.String())
	}
}

// openStreams waits for destination's streams to end and returns how
// many are open.
func openStreams(t *testing.T, dst *destinationtest.Server) float64 {
	t.Helper()
	var open float64
	eventually.Holds(5*time.Second, func() bool {
		families, err := dst.Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		open = 0
		for _, f := range families {
			if f.GetName() == "plexus_destination_streams" {
				for _, m := range f.Metric {
					open += m.GetGauge().GetValue()
				}
			}
		}
		return open == 0
	})
	return open
}

// TestEndpointsAnswers: what destination says of a service it does not
// know, an ExternalName one, one without endpoints; and the comparison
// when the slices cannot be read.
func TestEndpointsAnswers(t *testing.T) {
	e, _ := askDestination(t, "example.org")
	for _, tc := range []struct {
		a       Authority
		compare bool
		want    string
	}{
		{Authority{"nope", "shop", 80}, false, "nope.shop.svc.cluster.local:80: 0 endpoints published by destination (pod plexus-system/plexus-destination-b, trust domain example.org): it does not know the service (it does not exist, or is of type ExternalName, which proxies resolve by DNS)\n"},
		{Authority{"ext", "shop", 80}, false, "ext.shop.svc.cluster.local:80: 0 endpoints published by destination (pod plexus-system/plexus-destination-b, trust domain example.org): it does not know the service"},
		{Authority{"web", "shop", 53}, false, "web.shop.svc.cluster.local:53: 0 endpoints published by destination (pod plexus-system/plexus-destination-b, trust domain example.org)\n"},
		{Authority{"nope", "shop", 80}, true, "\nfor comparison, the EndpointSlices by destination's rules (computed here from the API):\nservice shop/nope not found\n"},
		{Authority{"web", "shop", 53}, true, "service shop/web has no TCP port 53 (it has: 80); destination gives no endpoints\n"},
	} {
		e.Compare = tc.compare
		r, err := e.Run(context.Background(), tc.a)
		if err != nil {
			t.Errorf("%+v: %v", tc.a, err)
			continue
		}
		var out bytes.Buffer
		if err := RenderEndpoints(&out, r, ""); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%+v: got\n%s\nwant it to contain %q", tc.a, out.String(), tc.want)
		}
	}
}

// TestEndpointsCompareDiffers: when the API says otherwise than
// destination (here: the API lost pod web-b and has one more ready
// endpoint), the comparison names the addresses.
func TestEndpointsCompareDiffers(t *testing.T) {
	e, dst := askDestination(t, "cluster.local")
	var objs []runtime.Object
	for _, o := range shopObjects() {
		switch o := o.(type) {
		case *corev1.Pod:
			if o.Name == "web-b" {
				continue
			}
		case *discoveryv1.EndpointSlice:
			if o.Name == "web-2" {
				o.Endpoints = append(o.Endpoints, ep("10.0.0.8", "", ptr(true), ptr(true), ptr(false)))
			}
		}
		objs = append(objs, o)
	}
	e.Client = fake.NewClientset(append(objs, destinationPod("plexus-destination-b", true, 8086), anchorsConfigMap(dst.PKI.AnchorsPEM()))...)
	e.Compare = true
	r, err := e.Run(context.Background(), Authority{"web", "shop", 80})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := RenderEndpoints(&out, r, ""); err != nil {
		t.Fatal(err)
	}
	want := "destination and the EndpointSlices differ: destination sends 10.0.0.2:8080, which the slices do not publish; the slices publish 10.0.0.8:8080, which destination does not send"
	if !strings.Contains(out.String(), want) {
		t.Errorf("got\n%s\nwant it to contain %q", out.String(), want)
	}
}

// TestEndpointsErrors: no ready destination pod, no trust anchors, a
// destination that does not prove the expected identity, or not of the
// anchors, are errors naming what is wrong.
func TestEndpointsErrors(t *testing.T) {
	e, _ := askDestination(t, "cluster.local")
	ctx := context.Background()
	web := Authority{"web", "shop", 80}

	noPods := e
	noPods.Client = fake.NewClientset(destinationPod("plexus-destination-a", false, 8086), anchorsConfigMap(nil))
	if _, err := noPods.Run(ctx, web); err == nil || err.Error() != "no ready destination pod in plexus-system (1 pods match app.kubernetes.io/name=plexus-destination)" {
		t.Errorf("no ready pod: %v", err)
	}
	noAnchors := e
	noAnchors.Client = fake.NewClientset(destinationPod("plexus-destination-b", true, 8086))
	if _, err := noAnchors.Run(ctx, web); err == nil || err.Error() != "the trust anchors (ConfigMap plexus-system/plexus-identity-trust-anchors, key ca-bundle.crt): not found" {
		t.Errorf("no anchors: %v", err)
	}
	otherTD := e
	otherTD.TrustDomain = "other.example"
	if _, err := otherTD.Run(ctx, web); err == nil || !strings.Contains(err.Error(), "want spiffe://other.example/ns/plexus-system/sa/plexus-destination, got spiffe://cluster.local/ns/plexus-system/sa/plexus-destination") {
		t.Errorf("another identity: %v", err)
	}
	otherMesh := e
	otherMesh.Client = fake.NewClientset(destinationPod("plexus-destination-b", true, 8086), anchorsConfigMap(destinationtest.NewPKI(t, "cluster.local").AnchorsPEM()))
	if _, err := otherMesh.Run(ctx, web); err == nil || !strings.Contains(err.Error(), "destination's certificate is not of the mesh's trust anchors") {
		t.Errorf("another mesh's anchors: %v", err)
	}
	if _, err := e.Run(ctx, Authority{"web", "shop", 0}); status.Code(errors.Unwrap(err)) != codes.InvalidArgument {
		t.Errorf("port 0: %v, want destination's InvalidArgument", err)
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
