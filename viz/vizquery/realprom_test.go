package vizquery

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// prometheusBinary finds a Prometheus server to test the queries on:
// $PLEXUS_PROMETHEUS, the one deps.sh builds, or one on the PATH.
func prometheusBinary() string {
	if p := os.Getenv("PLEXUS_PROMETHEUS"); p != "" {
		return p
	}
	cache := os.Getenv("PLEXUS_CACHE_DIR")
	if cache == "" {
		if home, err := os.UserHomeDir(); err == nil {
			cache = filepath.Join(home, ".cache", "plexus")
		}
	}
	if m, _ := filepath.Glob(filepath.Join(cache, "prometheus", "*", "bin", "prometheus")); len(m) > 0 {
		return m[len(m)-1]
	}
	p, _ := exec.LookPath("prometheus")
	return p
}

// TestRealPrometheus runs every query on a real Prometheus that scrapes a
// fake proxy once a second: the PromQL parses, and the figures are the
// ones the counters imply.
func TestRealPrometheus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Prometheus server (-short)")
	}
	bin := prometheusBinary()
	if bin == "" {
		t.Skip("no Prometheus binary (integration/cluster/deps.sh prometheus builds one; or set PLEXUS_PROMETHEUS)")
	}
	var scrapes atomic.Int64
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		n := scrapes.Add(1)
		fmt.Fprint(w, fakeProxyMetrics(n))
	}))
	defer target.Close()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, scrape_timeout: 1s}
scrape_configs:
  - job_name: plexus-proxy
    static_configs:
      - targets: [%q]
        labels: {namespace: demo, pod: web-1, workload_kind: Deployment, workload_name: web}
`, strings.TrimPrefix(target.URL, "http://"))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	log, _ := os.Create(filepath.Join(dir, "log"))
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "log"))
			t.Logf("prometheus log:\n%s", b)
		}
	}()
	c, err := New("http://"+addr, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !eventually.Holds(30*time.Second, func() bool { return scrapes.Load() >= 6 }) {
		t.Fatalf("prometheus scraped the fake proxy %d times in 30s", scrapes.Load())
	}
	// The sixth scrape is stored: scrape n says 10n plaintext successes.
	var stored float64
	if !eventually.Holds(10*time.Second, func() bool {
		v, _, _, err := c.api.Query(ctx, `max(response_total{tls="false"})`, time.Now())
		if vec, ok := v.(model.Vector); err == nil && ok && len(vec) == 1 {
			stored = float64(vec[0].Value)
		}
		return stored >= 60
	}) {
		t.Fatalf("prometheus holds %g plaintext successes 10s after the sixth scrape, want at least 60", stored)
	}

	h, err := c.Health(ctx)
	if err != nil || h.ProxyTargets != 1 || h.ProxyTargetsUp != 1 {
		t.Fatalf("health %+v, %v", h, err)
	}
	rows, err := c.Golden(ctx, ByPod, Filter{Namespace: "demo"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || rows[0].Pod != "web-1" || rows[0].SuccessRate == nil {
		t.Fatalf("rows = %+v", rows)
	}
	g := rows[0]
	// Per scrape: 9 successes and 1 failure over mTLS from load, 10
	// plaintext successes; latencies all in (10, 20] ms.
	approx(t, "success rate", g.SuccessRate, 19.0/20)
	approx(t, "tls share", g.TLSShare, 0.5)
	approx(t, "meshed share", g.MeshedShare, 0.5)
	// rate() divides by the whole minute, of which a few seconds have data.
	if *g.RPS <= 0 || *g.LatencyP50 <= 10 || *g.LatencyP99 > 20 {
		t.Errorf("rps %g p50 %g p99 %g, want traffic and latencies in (10, 20]", *g.RPS, *g.LatencyP50, *g.LatencyP99)
	}
	sls, err := c.Sparklines(ctx, ByWorkload, Filter{Namespace: "demo"}, 2*time.Minute, 2*time.Second)
	sl := sls[Key{Namespace: "demo", WorkloadKind: "Deployment", WorkloadName: "web"}]
	if err != nil || len(sls) != 1 || len(sl.RPS) == 0 || len(sl.SuccessRate) == 0 || len(sl.LatencyP99) == 0 {
		t.Fatalf("sparklines %+v, %v", sls, err)
	}
	edges, err := c.Edges(ctx, fake.NewClientset(pod("demo", "load-1", "load", "Deployment", "load"), pod("demo", "web-1", "web", "Deployment", "web")), "demo", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range edges {
		got = append(got, e.Source.String()+" → "+e.Destination.String()+" "+e.Protocol+" "+e.ServerID)
	}
	if strings.Join(got, "; ") != "demo/Deployment/load → demo/Deployment/web http spiffe://cluster.local/ns/demo/sa/web; unmeshed → demo/Deployment/web http " {
		t.Errorf("edges: %q", got)
	}
	rs, err := c.Routes(ctx, Filter{Namespace: "demo", WorkloadName: "web"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 1 || rs[0].Route.Name != "canary" || rs[0].SuccessRate == nil || rs[0].Retries == 0 || rs[0].LatencyP50 == nil {
		t.Fatalf("routes = %+v", rs)
	}
	approx(t, "route success", rs[0].SuccessRate, 0.75)
}

// fakeProxyMetrics is a proxy's scrape after n scrapes' worth of traffic.
func fakeProxyMetrics(n int64) string {
	var b strings.Builder
	in := `direction="inbound",target_addr="10.0.0.1:8080",authority="web:8080"`
	meshed := in + `,tls="true",client_id="spiffe://cluster.local/ns/demo/sa/load",server_id=""`
	plain := in + `,tls="false",client_id="",server_id=""`
	fmt.Fprintf(&b, "# TYPE response_total counter\n")
	fmt.Fprintf(&b, "response_total{%s,status_code=\"200\",classification=\"success\",grpc_status=\"\",error=\"\"} %d\n", meshed, 9*n)
	fmt.Fprintf(&b, "response_total{%s,status_code=\"500\",classification=\"failure\",grpc_status=\"\",error=\"\"} %d\n", meshed, n)
	fmt.Fprintf(&b, "response_total{%s,status_code=\"200\",classification=\"success\",grpc_status=\"\",error=\"\"} %d\n", plain, 10*n)
	fmt.Fprintf(&b, "# TYPE response_latency_ms histogram\n")
	for _, l := range []string{meshed, plain} {
		for _, le := range []string{"10", "20", "+Inf"} {
			v := 10 * n
			if le == "10" {
				v = 0
			}
			fmt.Fprintf(&b, "response_latency_ms_bucket{%s,status_code=\"200\",le=%q} %d\n", l, le, v)
		}
		fmt.Fprintf(&b, "response_latency_ms_sum{%s,status_code=\"200\"} %d\nresponse_latency_ms_count{%s,status_code=\"200\"} %d\n", l, 150*n, l, 10*n)
	}
	route := `parent_group="core",parent_kind="Service",parent_namespace="demo",parent_name="books",parent_port="8080",parent_section_name="",route_group="gateway.networking.k8s.io",route_kind="HTTPRoute",route_namespace="demo",route_name="canary",route_port="",route_section_name=""`
	fmt.Fprintf(&b, "# TYPE outbound_http_route_request_statuses_total counter\n")
	fmt.Fprintf(&b, "outbound_http_route_request_statuses_total{%s,http_status=\"200\",error=\"\"} %d\n", route, 3*n)
	fmt.Fprintf(&b, "outbound_http_route_request_statuses_total{%s,http_status=\"503\",error=\"\"} %d\n", route, n)
	fmt.Fprintf(&b, "# TYPE outbound_http_route_request_duration_seconds histogram\n")
	for _, le := range []string{"0.01", "0.1", "+Inf"} {
		fmt.Fprintf(&b, "outbound_http_route_request_duration_seconds_bucket{%s,le=%q} %d\n", route, le, 4*n)
	}
	fmt.Fprintf(&b, "outbound_http_route_request_duration_seconds_sum{%s} %g\noutbound_http_route_request_duration_seconds_count{%s} %d\n", route, 0.02*float64(n), route, 4*n)
	fmt.Fprintf(&b, "# TYPE outbound_http_route_retry_requests_total counter\noutbound_http_route_retry_requests_total{%s} %d\n", route, n)
	return b.String()
}
