package mesh

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// The multicluster benchmark's settings (make bench-multicluster).
const (
	envMulticlusterBench    = "PLEXUS_BENCH_MULTICLUSTER"
	envMulticlusterBenchOut = "PLEXUS_BENCH_MULTICLUSTER_OUT"
	envMulticlusterRates    = "PLEXUS_BENCH_MULTICLUSTER_RATES"
	envMulticlusterRounds   = "PLEXUS_BENCH_MULTICLUSTER_ROUNDS"
	envMulticlusterDuration = "PLEXUS_BENCH_MULTICLUSTER_DURATION"
)

// TestMulticlusterBench (issue 27's measurement; a benchmark, not part of
// make test): a's meshed client calls b's meshed server across the two
// local clusters, flat (pod to pod, hello-flat-b) against through b's
// gateway (hello-gw-b, the same pods), runs of each interleaved at fixed
// rates. It reports each run's latency, the two proxies' CPU per request
// and the gateway's CPU per 1,000 requests and its memory.
func TestMulticlusterBench(t *testing.T) {
	if os.Getenv(envMulticlusterBench) != "1" {
		t.Skipf("a benchmark: run by make bench-multicluster (%s=1)", envMulticlusterBench)
	}
	rates := envInts(t, envMulticlusterRates, "1000")
	rounds := envInts(t, envMulticlusterRounds, "2")[0]
	duration, err := time.ParseDuration(envOr(envMulticlusterDuration, "30s"))
	if err != nil {
		t.Fatalf("%s: %v", envMulticlusterDuration, err)
	}
	p := linkPair(t)
	ctx := clustertest.Context(t, 60*time.Minute)
	ns := p.b.Namespace(t, "mc-bench", meshLabels)
	p.a.NamespaceNamed(t, ns, meshLabels)
	deploy(t, p.b, ns, "server", 1, meshed, podSpec("server", "serve", ":8080"))
	deploy(t, p.a, ns, "client", 1, meshed, podSpec("client", "serve", ":8081"))
	for _, s := range []struct{ name, mode string }{{"hello-flat", mc.ExportedRemoteDiscovery}, {"hello-gw", mc.ExportedGateway}} {
		serviceFor(t, p.b, ns, s.name, "server", 8080)
		setExport(t, p.b, ns, s.name, s.mode)
	}
	p.b.WaitDeploymentReady(t, ns, "server", 3*time.Minute)
	p.a.WaitDeploymentReady(t, ns, "client", 3*time.Minute)
	within(t, "both mirrors in a", 30*time.Second, func() bool {
		gw, err := p.a.Client.CoreV1().Services(ns).Get(ctx, "hello-gw-b", metav1.GetOptions{})
		return mirrorIn(p.a, ns, "hello-flat-b")() && err == nil && gw.Labels[mc.GatewayLabel] == "b"
	}, nil)
	client, server := pods(t, p.a, ns, "client")[0].Name, pods(t, p.b, ns, "server")[0].Name
	gwPods, err := p.b.Client.CoreV1().Pods(mc.Namespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=plexus-gateway"})
	if err != nil || len(gwPods.Items) != 1 {
		t.Fatalf("b's gateway pod: %v", err)
	}
	gwPod := gwPods.Items[0].Name
	gatewayMetrics := func() string {
		raw, err := p.b.Client.CoreV1().Pods(mc.Namespace).ProxyGet("http", gwPod, "9993", "/metrics", nil).DoRaw(ctx)
		if err != nil {
			t.Fatalf("gateway metrics: %v", err)
		}
		return string(raw)
	}
	url := func(svc string) string { return "http://" + svc + "." + ns + ".svc.cluster.local/" }
	run := func(svc string, rate int, d time.Duration) loadResult {
		res, err := execLoad(ctx, p.a, ns, client, "-rate", fmt.Sprint(rate), "-duration", d.String(), "-c", fmt.Sprint(clusterBenchWorkers), "-timeout", "5s", url(svc))
		if err != nil {
			t.Fatalf("testapp load: %v", err)
		}
		return res
	}
	usage := func() (proxies, gateway, gatewayRSS float64) {
		cm, sm, gm := proxyMetrics(t, p.a, ns, client), proxyMetrics(t, p.b, ns, server), gatewayMetrics()
		return metricValue(t, cm, "process_cpu_seconds_total") + metricValue(t, sm, "process_cpu_seconds_total"),
			metricValue(t, gm, "process_cpu_seconds_total"), metricValue(t, gm, "process_resident_memory_bytes")
	}
	// Warm both paths; prove each is mTLS from a's client to b's server.
	forwarded := gatewayCount(t, p.b, gwPod, "forwarded")
	run("hello-flat-b", 200, 5*time.Second)
	run("hello-gw-b", 200, 5*time.Second)
	if gatewayCount(t, p.b, gwPod, "forwarded") <= forwarded {
		t.Fatal("the gateway forwarded nothing: hello-gw-b did not go through it")
	}
	wantSeries(t, proxyMetrics(t, p.b, ns, server), "request_total", `direction="inbound"`, `tls="true"`,
		`client_id="spiffe://`+trustDomain+`/ns/`+ns+`/sa/client"`)
	_, _, idleRSS := usage()

	type row struct {
		rate, round       int
		path              string
		res               loadResult
		proxyCPU, gateway float64 // seconds over the run
		gatewayRSS        float64
	}
	var rows []row
	for _, rate := range rates {
		for r := range rounds {
			order := []string{"flat", "gateway"}
			if r%2 == 1 {
				order = []string{"gateway", "flat"}
			}
			for _, path := range order {
				svc := map[string]string{"flat": "hello-flat-b", "gateway": "hello-gw-b"}[path]
				run(svc, rate, clusterBenchWarmup)
				p0, g0, _ := usage()
				res := run(svc, rate, duration)
				p1, g1, rss := usage()
				rows = append(rows, row{rate: rate, round: r + 1, path: path, res: res, proxyCPU: p1 - p0, gateway: g1 - g0, gatewayRSS: rss})
			}
		}
	}
	var w strings.Builder
	fmt.Fprintf(&w, "Multicluster: a's client to b's server, flat (pod to pod) against through b's gateway, HTTP/1.1 keep-alive, %d connections, %v per run, open loop, interleaved\n\n", clusterBenchWorkers, duration)
	fmt.Fprintln(&w, "| rate | round | path | requests | p50 ms | p90 ms | p99 ms | max ms | proxies' CPU/request µs | gateway CPU ms per 1,000 requests | gateway RSS MiB |")
	fmt.Fprintln(&w, "|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, r := range rows {
		gw, rss := "—", "—"
		if r.path == "gateway" {
			gw, rss = fmt.Sprintf("%.1f", 1e6*r.gateway/float64(r.res.Requests)), fmt.Sprintf("%.1f", r.gatewayRSS/(1<<20))
		}
		fmt.Fprintf(&w, "| %d | %d | %s | %d | %.3f | %.3f | %.3f | %.3f | %.1f | %s | %s |\n", r.rate, r.round, r.path, r.res.Requests,
			r.res.Latency.P50, r.res.Latency.P90, r.res.Latency.P99, r.res.Latency.Max, 1e6*r.proxyCPU/float64(r.res.Requests), gw, rss)
	}
	fmt.Fprintf(&w, "\nThe gateway idle before the runs: %.1f MiB RSS.\n\n| rate | gateway's added p50 ms (each round) | added p99 ms (each round) |\n|---:|---|---|\n", idleRSS/(1<<20))
	for _, rate := range rates {
		var p50, p99 []string
		for r := 1; r <= rounds; r++ {
			var flat, gw loadResult
			for _, x := range rows {
				if x.rate == rate && x.round == r {
					if x.path == "flat" {
						flat = x.res
					} else {
						gw = x.res
					}
				}
			}
			p50 = append(p50, fmt.Sprintf("%+.3f", gw.Latency.P50-flat.Latency.P50))
			p99 = append(p99, fmt.Sprintf("%+.3f", gw.Latency.P99-flat.Latency.P99))
		}
		fmt.Fprintf(&w, "| %d | %s | %s |\n", rate, strings.Join(p50, ", "), strings.Join(p99, ", "))
	}
	t.Log("\n" + w.String())
	if out := os.Getenv(envMulticlusterBenchOut); out != "" {
		if err := os.WriteFile(out, []byte(w.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range rows {
		if failed := r.res.Requests - r.res.Statuses["200"]; failed > 0 {
			t.Errorf("%s at %d req/s, round %d: %d of %d requests failed: %v", r.path, r.rate, r.round, failed, r.res.Requests, r.res.Errors)
		}
	}
}
