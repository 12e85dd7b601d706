package deploy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/testsupport/vizprom"
)

// TestVizPrometheusLive runs the real Prometheus (deps.sh prometheus) with
// the viz scrape config against a fake API server listing pods and fake
// proxies serving the proxy's own metrics on 127.0.0.1: the relabelling
// must give one target per meshed pod with exactly the promised labels,
// and every dashboard query must run, the golden ones with the right
// values.
func TestVizPrometheusLive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus (-short)")
	}
	bin := prometheusTool(t, "prometheus")

	web := newFakeProxy(t, webTraffic())
	books := newFakeProxy(t, func(m *metrics.Metrics) {
		for range 3 {
			inbound(m, 200, metrics.TLS{On: true, PeerID: "spiffe://cluster.local/ns/demo/sa/web"})
		}
	})
	bare := newFakeProxy(t, func(*metrics.Metrics) {})
	control := newFakeProxy(t, func(*metrics.Metrics) {})

	api := newFakeAPIServer(t, []corev1.Pod{
		// Injected with the workload labels, the proxy a native sidecar.
		meshedPod("demo", "web-7c9d8-abcde", "ReplicaSet", "web-7c9d8", map[string]string{
			"pod-template-hash": "7c9d8", "plexus.dev/workload-kind": "Deployment", "plexus.dev/workload-name": "web",
		}, web.port, true, corev1.PodRunning),
		// Injected before the labels existed: the controller stands in.
		meshedPod("demo", "books-5d8f9c7b6-xyz12", "ReplicaSet", "books-5d8f9c7b6", map[string]string{
			"pod-template-hash": "5d8f9c7b6",
		}, books.port, false, corev1.PodRunning),
		meshedPod("demo", "debug", "", "", nil, bare.port, false, corev1.PodRunning),
		// A finished Job's pod: nothing to scrape.
		meshedPod("demo", "migrate-x1", "Job", "migrate", map[string]string{
			"plexus.dev/workload-kind": "Job", "plexus.dev/workload-name": "migrate",
		}, 1, false, corev1.PodSucceeded),
		unmeshedPod("demo", "legacy", map[string]int32{"http": 8080}),
		controlPod("plexus-destination", "6f7c5", control.port),
	})

	promAddr := freeAddr(t)
	config := liveConfig(t, api.URL, promAddr)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), config, 0o644); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--storage.tsdb.retention.time=6h", "--web.listen-address="+promAddr)
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("prometheus log:\n%s", log.String())
		}
	})
	promURL := "http://" + promAddr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The targets, as relabelled.
	want := map[string]map[string]string{
		web.addr: {"job": "plexus-proxy", "instance": web.addr, "namespace": "demo", "pod": "web-7c9d8-abcde",
			"workload_kind": "Deployment", "workload_name": "web"},
		books.addr: {"job": "plexus-proxy", "instance": books.addr, "namespace": "demo", "pod": "books-5d8f9c7b6-xyz12",
			"workload_kind": "Deployment", "workload_name": "books"},
		bare.addr: {"job": "plexus-proxy", "instance": bare.addr, "namespace": "demo", "pod": "debug",
			"workload_kind": "Pod", "workload_name": "debug"},
		control.addr: {"job": "plexus-control", "instance": control.addr, "namespace": "plexus-system",
			"pod": "plexus-destination-6f7c5-q2w3e", "component": "plexus-destination",
			"workload_kind": "Deployment", "workload_name": "plexus-destination"},
		promAddr: {"job": "prometheus", "instance": promAddr},
	}
	targets := waitFor(t, ctx, "every target up", func() (map[string]map[string]string, error) {
		got, err := activeTargets(ctx, promURL)
		if err != nil {
			return nil, err
		}
		for addr, tg := range got {
			if tg["health"] != "up" {
				return nil, fmt.Errorf("target %s is %s", addr, tg["health"])
			}
		}
		if len(got) < len(want) {
			return nil, fmt.Errorf("%d targets, want %d", len(got), len(want))
		}
		return got, nil
	})
	for addr, labels := range targets {
		delete(labels, "health")
		if !equalMaps(labels, want[addr]) {
			t.Errorf("target %s: labels %v, want %v", addr, labels, want[addr])
		}
	}
	if len(targets) != len(want) {
		t.Errorf("%d targets, want %d: %v", len(targets), len(want), targets)
	}

	// The golden metrics.
	// rate() divides by its whole range: one of 5 s, full after 6 scrapes.
	vars := vizprom.Vars("demo", "Deployment", "web")
	vars["__rate_interval"] = "5s"
	waitFor(t, ctx, "6 scrapes of web", func() (int, error) {
		n, err := vizprom.InstantQuery(ctx, http.DefaultClient, promURL,
			`count_over_time(outbound_http_route_request_statuses_total{workload_name="web"}[1m]) >= 6`)
		if err == nil && n == 0 {
			err = fmt.Errorf("not yet")
		}
		return n, err
	})
	results, err := vizprom.Run(ctx, http.DefaultClient, promURL, os.DirFS("plexus-viz/grafana"), vars)
	if err != nil {
		t.Fatal(err)
	}
	values := map[string]float64{}
	for _, r := range results {
		if r.Err != nil {
			t.Errorf("%s: %v", r.Query, r.Err)
		}
		key := r.Query.Dashboard + ": " + r.Query.Panel + " " + r.Query.RefID
		if r.Series == 1 {
			if v, err := scalarValue(ctx, promURL, r.Expr); err == nil {
				values[key] = v
			}
		}
	}
	// Ratios of one proxy's series are exact (their samples share
	// timestamps); across proxies, rates differ by scrape jitter.
	for key, want := range map[string]struct{ value, tolerance float64 }{
		"plexus-workload.json: Success rate A":         {0.9, 1e-9}, // 9 of 10 inbound
		"plexus-workload.json: mTLS share A":           {0.8, 1e-9}, // 8 of 10 inbound over mTLS
		"plexus-workload.json: Requests / s A":         {10, 2},     // 10 a scrape, a scrape a second
		"plexus-namespace.json: Success rate A":        {12.0 / 13, 0.01},
		"plexus-namespace.json: Meshed pods A":         {3, 0},
		"plexus-route.json: Success rate A":            {0.75, 1e-9}, // 3 of 4: a 503 fails, a 404 does not
		"plexus-route.json: Backend success rate A":    {0.75, 1e-9},
		"plexus-workload.json: Inbound latency C":      {0.5, 0.5}, // p99 in ms: all in the first bucket
		"plexus-workload.json: Open TCP connections A": {0, -1},    // no connections: no value
	} {
		got, ok := values[key]
		switch {
		case want.tolerance < 0:
			if ok {
				t.Errorf("%s = %v, want no value", key, got)
			}
		case !ok:
			t.Errorf("%s: no single value (values: %v)", key, values)
		case math.Abs(got-want.value) > want.tolerance:
			t.Errorf("%s = %v, want %v ± %v", key, got, want.value, want.tolerance)
		}
	}
}

// webTraffic returns what web's proxy counts between two scrapes: 10
// inbound requests (one 500, two in plaintext), 5 outbound to books, and
// 4 requests of an HTTPRoute on books (a 503 fails, a 404 does not). The
// route is held, as a proxy holds the routes it uses.
func webTraffic() func(*metrics.Metrics) {
	var route *metrics.RouteSeries
	var backend *metrics.BackendSeries
	books := metrics.Ref{Group: "core", Kind: "Service", Namespace: "demo", Name: "books", Port: "7000"}
	return func(m *metrics.Metrics) {
		mtls := metrics.TLS{On: true, PeerID: "spiffe://cluster.local/ns/demo/sa/load"}
		for i := range 10 {
			status, tls := 200, mtls
			if i == 0 {
				status = 500
			}
			if i >= 8 {
				tls = metrics.TLS{}
			}
			inbound(m, status, tls)
		}
		dst := netip.MustParseAddrPort("10.96.0.20:7000")
		for range 5 {
			r := m.StartRequest(metrics.Outbound, dst, "books.demo.svc.cluster.local:7000",
				metrics.TLS{On: true, PeerID: "spiffe://cluster.local/ns/demo/sa/books"}, "", nil)
			r.Headers(200)
			r.Done(200, "", "")
		}
		if route == nil {
			route = m.Route(false, books, metrics.Ref{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Namespace: "demo", Name: "books-canary"})
			backend = route.Backend(books)
		}
		for _, status := range []int{200, 200, 404, 503} {
			backend.Sent()
			backend.Done(3*time.Millisecond, status, "", "")
			route.Done(4*time.Millisecond, status, "", "")
		}
		route.Retry()
	}
}

func inbound(m *metrics.Metrics, status int, tls metrics.TLS) {
	r := m.StartRequest(metrics.Inbound, netip.MustParseAddrPort("10.244.0.7:8080"), "web.demo.svc.cluster.local:8080", tls, "", nil)
	r.Headers(status)
	r.Done(status, "", "")
}

// fakeProxy serves a proxy's metrics registry on 127.0.0.1, adding one
// round of traffic before each scrape.
type fakeProxy struct {
	addr string
	port int
}

func newFakeProxy(t *testing.T, traffic func(*metrics.Metrics)) fakeProxy {
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, 100)
	var mu sync.Mutex
	h := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		traffic(m)
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(s.Close)
	port := s.Listener.Addr().(*net.TCPAddr).Port
	return fakeProxy{addr: s.Listener.Addr().String(), port: port}
}

// meshedPod is a pod on 127.0.0.1 whose plexus-proxy container (a native
// sidecar when native) serves its admin port on adminPort.
func meshedPod(ns, name, ownerKind, owner string, labels map[string]string, adminPort int, native bool, phase corev1.PodPhase) corev1.Pod {
	proxy := corev1.Container{Name: "plexus-proxy", Ports: []corev1.ContainerPort{
		{Name: "plexus-inbound", ContainerPort: 4143},
		{Name: "plexus-admin", ContainerPort: int32(adminPort)},
		{Name: "plexus-tap", ContainerPort: 4190},
	}}
	p := unmeshedPod(ns, name, map[string]int32{"http": 8080})
	p.Labels = labels
	p.Status.Phase = phase
	if owner != "" {
		yes := true
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: ownerKind, Name: owner, UID: "u", Controller: &yes}}
	}
	if native {
		always := corev1.ContainerRestartPolicyAlways
		proxy.RestartPolicy = &always
		p.Spec.InitContainers = []corev1.Container{proxy}
	} else {
		p.Spec.Containers = append(p.Spec.Containers, proxy)
	}
	return p
}

func unmeshedPod(ns, name string, ports map[string]int32) corev1.Pod {
	c := corev1.Container{Name: "app"}
	for n, p := range ports {
		c.Ports = append(c.Ports, corev1.ContainerPort{Name: n, ContainerPort: p})
	}
	return corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), ResourceVersion: "10"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{c}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "127.0.0.1"},
	}
}

// controlPod is a pod of the control plane's Deployment name, serving its
// admin port on adminPort.
func controlPod(name, hash string, adminPort int) corev1.Pod {
	yes := true
	p := unmeshedPod("plexus-system", name+"-"+hash+"-q2w3e", map[string]int32{"grpc": 8086, "admin": int32(adminPort)})
	p.Labels = map[string]string{"app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "plexus", "pod-template-hash": hash}
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-" + hash, UID: "u", Controller: &yes}}
	return p
}

// newFakeAPIServer serves pods: lists (all namespaces or one), and
// watches that send the initial events when asked for them and then
// nothing until the client goes.
func newFakeAPIServer(t *testing.T, pods []corev1.Pod) *httptest.Server {
	stop := make(chan struct{})
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ns := ""
		switch parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/"); {
		case r.URL.Path == "/api/v1/pods":
		case len(parts) == 5 && parts[2] == "namespaces" && parts[4] == "pods":
			ns = parts[3]
		default:
			http.NotFound(w, r)
			return
		}
		var items []corev1.Pod
		for _, p := range pods {
			if ns == "" || p.Namespace == ns {
				items = append(items, p)
			}
		}
		w.Header().Set("Content-Type", "application/json")
		q := r.URL.Query()
		if q.Get("watch") != "true" && q.Get("watch") != "1" {
			json.NewEncoder(w).Encode(corev1.PodList{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"},
				ListMeta: metav1.ListMeta{ResourceVersion: "10"},
				Items:    items,
			})
			return
		}
		enc := json.NewEncoder(w)
		if q.Get("sendInitialEvents") == "true" {
			for _, p := range items {
				enc.Encode(map[string]any{"type": "ADDED", "object": p})
			}
			enc.Encode(map[string]any{"type": "BOOKMARK", "object": corev1.Pod{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
				ObjectMeta: metav1.ObjectMeta{ResourceVersion: "10",
					Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}},
			}})
		}
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); s.Close() })
	return s
}

// liveConfig is the viz scrape config pointed at the fake API server,
// scraping every second, with Prometheus's own target at promAddr.
func liveConfig(t *testing.T, apiServer, promAddr string) []byte {
	t.Helper()
	var c map[string]any
	if err := yaml.Unmarshal([]byte(prometheusYML(t)), &c); err != nil {
		t.Fatal(err)
	}
	c["global"] = map[string]any{"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"}
	for _, sc := range c["scrape_configs"].([]any) {
		job := sc.(map[string]any)
		if sds, ok := job["kubernetes_sd_configs"].([]any); ok {
			for _, sd := range sds {
				sd.(map[string]any)["api_server"] = apiServer
			}
		}
		if job["job_name"] == "prometheus" {
			job["static_configs"] = []any{map[string]any{"targets": []any{promAddr}}}
		}
	}
	b, err := yaml.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// activeTargets returns Prometheus's active targets by address: their
// labels and, as "health", their health.
func activeTargets(ctx context.Context, promURL string) (map[string]map[string]string, error) {
	var r struct {
		Data struct {
			ActiveTargets []struct {
				Labels    map[string]string `json:"labels"`
				Health    string            `json:"health"`
				LastError string            `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	if err := getJSON(ctx, promURL+"/api/v1/targets?state=active", &r); err != nil {
		return nil, err
	}
	out := map[string]map[string]string{}
	for _, tg := range r.Data.ActiveTargets {
		l := tg.Labels
		l["health"] = tg.Health
		if tg.LastError != "" {
			l["health"] += ": " + tg.LastError
		}
		out[l["instance"]] = l
	}
	return out, nil
}

// scalarValue evaluates expr, which must yield one sample, to its value.
func scalarValue(ctx context.Context, promURL, expr string) (float64, error) {
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := getJSON(ctx, promURL+"/api/v1/query?query="+url.QueryEscape(expr), &r); err != nil {
		return 0, err
	}
	if len(r.Data.Result) != 1 {
		return 0, fmt.Errorf("%d samples", len(r.Data.Result))
	}
	s, _ := r.Data.Result[0].Value[1].(string)
	return strconv.ParseFloat(s, 64)
}

func getJSON(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// waitFor polls f every 200 ms until it succeeds or ctx ends.
func waitFor[T any](t *testing.T, ctx context.Context, what string, f func() (T, error)) T {
	t.Helper()
	for {
		v, err := f()
		if err == nil {
			return v
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for %s: %v", what, err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
