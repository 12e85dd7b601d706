package vizquery

import (
	"context"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/control/routestats"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

var ctx = context.Background()

func approx(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil {
		t.Errorf("%s = nil, want %g", what, want)
		return
	}
	if math.Abs(*got-want) > 1e-9 {
		t.Errorf("%s = %g, want %g", what, *got, want)
	}
}

func TestGoldenWorkloads(t *testing.T) {
	const (
		counts = `sum by (namespace, workload_kind, workload_name, classification, tls, client_id) (rate(response_total{job="plexus-proxy",namespace="demo",direction="inbound"}[1m]))`
		p50    = `histogram_quantile(0.5, sum by (namespace, workload_kind, workload_name, le) (rate(response_latency_ms_bucket{job="plexus-proxy",namespace="demo",direction="inbound"}[1m])))`
		p95    = `histogram_quantile(0.95, sum by (namespace, workload_kind, workload_name, le) (rate(response_latency_ms_bucket{job="plexus-proxy",namespace="demo",direction="inbound"}[1m])))`
		p99    = `histogram_quantile(0.99, sum by (namespace, workload_kind, workload_name, le) (rate(response_latency_ms_bucket{job="plexus-proxy",namespace="demo",direction="inbound"}[1m])))`
		pods   = `count by (namespace, workload_kind, workload_name) (up{job="plexus-proxy",namespace="demo"})`
		podsUp = `sum by (namespace, workload_kind, workload_name) (up{job="plexus-proxy",namespace="demo"})`
	)
	web := L{"namespace": "demo", "workload_kind": "Deployment", "workload_name": "web"}
	with := func(l L, kv ...string) L {
		out := L{}
		for k, v := range l {
			out[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	idle := L{"namespace": "demo", "workload_kind": "Deployment", "workload_name": "idle"}
	f := &fakeProm{answers: map[string]any{
		counts: vec(
			with(web, "classification", "success", "tls", "true", "client_id", "spiffe://cluster.local/ns/demo/sa/load"), "6",
			with(web, "classification", "failure", "tls", "true", "client_id", "spiffe://cluster.local/ns/demo/sa/load"), "1",
			with(web, "classification", "success", "tls", "false", "client_id", ""), "3",
			with(idle, "classification", "success", "tls", "false", "client_id", ""), "0",
		),
		p50:    vec(web, "12.5", idle, "NaN"),
		p95:    vec(web, "40"),
		p99:    vec(web, "+Inf"),
		pods:   vec(web, "2", idle, "1"),
		podsUp: vec(web, "1", idle, "1"),
	}}
	c := f.start(t)
	rows, err := c.Golden(ctx, ByWorkload, Filter{Namespace: "demo"}, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if got := f.queries(); !sameSet(got, []string{counts, p50, p95, p99, pods, podsUp}) {
		t.Fatalf("queries:\n%s", strings.Join(got, "\n"))
	}
	if len(rows) != 2 || rows[0].WorkloadName != "idle" || rows[1].WorkloadName != "web" {
		t.Fatalf("rows = %+v", rows)
	}
	idleRow, w := rows[0], rows[1]
	if idleRow.RPS != nil || idleRow.SuccessRate != nil || idleRow.LatencyP50 != nil || idleRow.Pods != 1 || idleRow.PodsUp != 1 {
		t.Errorf("idle row = %+v, want no figures and 1/1 pods", idleRow)
	}
	approx(t, "rps", w.RPS, 10)
	approx(t, "success", w.SuccessRate, 0.9)
	approx(t, "tls share", w.TLSShare, 0.7)
	approx(t, "meshed share", w.MeshedShare, 0.7)
	approx(t, "p50", w.LatencyP50, 12.5)
	approx(t, "p95", w.LatencyP95, 40)
	if w.LatencyP99 != nil {
		t.Errorf("p99 = %g, want nil for +Inf", *w.LatencyP99)
	}
	if w.Requests != 600 || w.Pods != 2 || w.PodsUp != 1 {
		t.Errorf("requests %g pods %d/%d, want 600 and 1/2", w.Requests, w.PodsUp, w.Pods)
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestGoldenEmptyAndLevels(t *testing.T) {
	f := &fakeProm{}
	c := f.start(t)
	rows, err := c.Golden(ctx, ByNamespace, Filter{}, 30*time.Second)
	if err != nil || len(rows) != 0 {
		t.Fatalf("rows %v err %v, want none", rows, err)
	}
	want := `sum by (namespace, classification, tls, client_id) (rate(response_total{job="plexus-proxy",direction="inbound"}[30s]))`
	if !slices.Contains(f.queries(), want) {
		t.Errorf("queries %q lack %q", f.queries(), want)
	}
	if _, err := c.Golden(ctx, "cluster", Filter{}, time.Minute); err == nil {
		t.Error("unknown level accepted")
	}
}

func TestLabelValuesEscaped(t *testing.T) {
	f := &fakeProm{}
	c := f.start(t)
	evil := "a\"}) or vector(1) # \\"
	if _, err := c.Golden(ctx, ByPod, Filter{Namespace: evil, Pod: "p\n"}, time.Minute); err != nil {
		t.Fatal(err)
	}
	for _, q := range f.queries() {
		if !strings.Contains(q, `namespace="a\"}) or vector(1) # \\"`) || !strings.Contains(q, `pod="p\n"`) {
			t.Errorf("value not escaped in %s", q)
		}
	}
	f2 := &fakeProm{}
	c2 := f2.start(t)
	if _, err := c2.Edges(ctx, fake.NewClientset(), "x.y", time.Minute); err != nil {
		t.Fatal(err)
	}
	if q := f2.queries()[0]; !strings.Contains(q, `client_id=~"spiffe://[^/]+/ns/x\\.y/sa/.+"`) {
		t.Errorf("regex not escaped: %s", q)
	}
}

func TestQueryError(t *testing.T) {
	f := &fakeProm{errorFor: qTargets("count", []string{"namespace"}, Filter{})}
	c := f.start(t)
	_, err := c.Golden(ctx, ByNamespace, Filter{}, time.Minute)
	if err == nil || !strings.Contains(err.Error(), "unexpected thing") || !strings.Contains(err.Error(), "count by (namespace)") {
		t.Fatalf("err = %v, want the query and Prometheus's reason", err)
	}
}

func TestSparklines(t *testing.T) {
	filter := Filter{Namespace: "demo", WorkloadKind: "Deployment", WorkloadName: "web"}
	sel := `{job="plexus-proxy",namespace="demo",workload_kind="Deployment",workload_name="web",direction="inbound"}`
	g := `(namespace, workload_kind, workload_name)`
	rps := `sum by ` + g + ` (rate(response_total` + sel + `[1m]))`
	success := `(sum by ` + g + ` (rate(response_total{job="plexus-proxy",namespace="demo",workload_kind="Deployment",workload_name="web",direction="inbound",classification="success"}[1m])) or 0 * ` + rps + `) / ` + rps
	p99 := `histogram_quantile(0.99, sum by (namespace, workload_kind, workload_name, le) (rate(response_latency_ms_bucket` + sel + `[1m])))`
	web := L{"namespace": "demo", "workload_kind": "Deployment", "workload_name": "web"}
	f := &fakeProm{answers: map[string]any{
		success: mat(web, 1699998180, "1", 1699998240, "NaN", 1699998300, "0.5"),
		rps:     mat(web, 1699998180, "2.5"),
	}}
	c := f.start(t)
	all, err := c.Sparklines(ctx, ByWorkload, filter, 30*time.Minute, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !sameSet(f.queries(), []string{success, rps, p99}) {
		t.Fatalf("queries:\n%s", strings.Join(f.queries(), "\n"))
	}
	sl, ok := all[Key{Namespace: "demo", WorkloadKind: "Deployment", WorkloadName: "web"}]
	if len(all) != 1 || !ok {
		t.Fatalf("sparklines = %+v", all)
	}
	if len(sl.SuccessRate) != 3 || sl.SuccessRate[1].Value != nil || *sl.SuccessRate[2].Value != 0.5 || !sl.SuccessRate[0].Time.Equal(time.Unix(1699998180, 0)) {
		t.Errorf("success = %+v", sl.SuccessRate)
	}
	if len(sl.RPS) != 1 || *sl.RPS[0].Value != 2.5 || sl.LatencyP99 == nil || len(sl.LatencyP99) != 0 {
		t.Errorf("rps %+v p99 %+v", sl.RPS, sl.LatencyP99)
	}
	if !sl.End.Equal(time.Unix(1700000000, 0).Truncate(30*time.Second)) || sl.End.Sub(sl.Start) != 30*time.Minute {
		t.Errorf("range %s..%s", sl.Start, sl.End)
	}
}

func pod(ns, name, sa, kind, workload string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{meshpod.LabelWorkloadKind: kind, meshpod.LabelWorkloadName: workload}},
		Spec:       corev1.PodSpec{ServiceAccountName: sa},
	}
}

func TestEdges(t *testing.T) {
	const (
		http = `sum by (namespace, workload_kind, workload_name, client_id, server_id, tls) (rate(response_total{job="plexus-proxy",direction="inbound",namespace="demo"}[1m])) > 0 or sum by (namespace, workload_kind, workload_name, client_id, server_id, tls) (rate(response_total{job="plexus-proxy",direction="inbound",client_id=~"spiffe://[^/]+/ns/demo/sa/.+"}[1m])) > 0`
		tcp  = `sum by (namespace, workload_kind, workload_name, client_id, server_id, tls) (rate(tcp_open_total{job="plexus-proxy",direction="inbound",namespace="demo",peer="src"}[1m])) > 0 or sum by (namespace, workload_kind, workload_name, client_id, server_id, tls) (rate(tcp_open_total{job="plexus-proxy",direction="inbound",client_id=~"spiffe://[^/]+/ns/demo/sa/.+",peer="src"}[1m])) > 0`
		open = `sum by (namespace, workload_kind, workload_name, client_id, server_id, tls) (tcp_open_connections{job="plexus-proxy",direction="inbound",namespace="demo",peer="src"}) > 0 or sum by (namespace, workload_kind, workload_name, client_id, server_id, tls) (tcp_open_connections{job="plexus-proxy",direction="inbound",client_id=~"spiffe://[^/]+/ns/demo/sa/.+",peer="src"}) > 0`
	)
	dst := func(name, client, tls string) L {
		return L{"namespace": "demo", "workload_kind": "Deployment", "workload_name": name, "client_id": client, "tls": tls}
	}
	const td = "spiffe://cluster.local/ns/demo/sa/"
	f := &fakeProm{answers: map[string]any{
		http: vec(
			dst("web", td+"load", "true"), "5",
			dst("books", td+"web", "true"), "4",
			dst("web", "", "false"), "0.2", // kubelet probes
			dst("books", td+"shared", "true"), "1", // two workloads run as shared
			// A linked cluster's load (trust domain b.cluster.local): not
			// this cluster's load, which runs as an account of that name.
			L{"namespace": "demo", "workload_kind": "Deployment", "workload_name": "web", "client_id": "spiffe://b.cluster.local/ns/demo/sa/load",
				"server_id": td + "web", "tls": "true"}, "2",
		),
		tcp: vec(
			dst("web", td+"load", "true"), "0.1",
			L{"namespace": "db", "workload_kind": "StatefulSet", "workload_name": "pg", "client_id": td + "books", "tls": "true"}, "0.5",
		),
		open: vec(dst("web", td+"load", "true"), "3"),
	}}
	kube := fake.NewClientset(
		pod("demo", "web-1", "web", "Deployment", "web"),
		pod("demo", "books-1", "books", "Deployment", "books"),
		pod("demo", "books-2", "books", "Deployment", "books"),
		pod("demo", "load-1", "load", "Deployment", "load"),
		pod("demo", "a-1", "shared", "Deployment", "a"),
		pod("demo", "b-1", "shared", "Deployment", "b"),
		pod("db", "pg-0", "pg", "StatefulSet", "pg"),
	)
	c := f.start(t)
	edges, err := c.Edges(ctx, kube, "demo", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !sameSet(f.queries(), []string{http, tcp, open}) {
		t.Fatalf("queries:\n%s", strings.Join(f.queries(), "\n"))
	}
	var got []string
	for _, e := range edges {
		got = append(got, strings.Join([]string{e.Source.String(), e.Destination.String(), e.Protocol, e.ClientID, e.ServerID}, " "))
	}
	want := []string{
		"b.cluster.local:demo/ServiceAccount/load demo/Deployment/web http spiffe://b.cluster.local/ns/demo/sa/load " + td + "web",
		"demo/Deployment/books db/StatefulSet/pg tcp " + td + "books spiffe://cluster.local/ns/db/sa/pg",
		"demo/Deployment/load demo/Deployment/web http " + td + "load " + td + "web",
		"demo/Deployment/web demo/Deployment/books http " + td + "web " + td + "books",
		"demo/ServiceAccount/shared demo/Deployment/books http " + td + "shared " + td + "books",
		"unmeshed demo/Deployment/web http  ",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("edges:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if edges[0].Source.Cluster != "b.cluster.local" || edges[0].RPS != 2 {
		t.Errorf("the linked cluster's load→web = %+v", edges[0])
	}
	lw := edges[2]
	if lw.RPS != 5 || lw.ConnectionsPerSec != 0.1 || lw.OpenConnections != 3 || !lw.Secured {
		t.Errorf("load→web = %+v", lw)
	}
	if edges[5].Secured || edges[5].Source.Name != Unmeshed {
		t.Errorf("unmeshed edge = %+v", edges[5])
	}
}

func TestRoutes(t *testing.T) {
	f := Filter{Namespace: "demo", WorkloadKind: "Deployment", WorkloadName: "web"}
	routeL := func(extra ...string) L {
		l := L{"parent_kind": "Service", "parent_namespace": "demo", "parent_name": "books", "parent_port": "8080",
			"route_group": "gateway.networking.k8s.io", "route_kind": "HTTPRoute", "route_namespace": "demo", "route_name": "canary"}
		for i := 0; i < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	httpQ := qRoutes("http", f, time.Minute)
	fp := &fakeProm{answers: map[string]any{httpQ: vec(
		routeL("plexus_counter", "requests", "error", ""), "100",
		routeL("plexus_counter", "requests", "error", "REQUEST_TIMEOUT"), "2",
		routeL("plexus_counter", "success"), "90",
		routeL("plexus_counter", "bucket", "le", "0.01"), "50",
		routeL("plexus_counter", "bucket", "le", "0.1"), "100",
		routeL("plexus_counter", "bucket", "le", "+Inf"), "102",
		routeL("plexus_counter", "backend_requests"), "120",
		routeL("plexus_counter", "retries"), "18",
		routeL("plexus_counter", "retry_successes"), "9",
		routeL("plexus_counter", "retry_limit_exceeded"), "1",
		routeL("plexus_counter", "retry_overflow"), "NaN",
	)}}
	c := fp.start(t)
	rows, err := c.Routes(ctx, f, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !sameSet(fp.queries(), []string{httpQ, qRoutes("grpc", f, time.Minute)}) {
		t.Fatalf("queries:\n%s", strings.Join(fp.queries(), "\n"))
	}
	if len(rows) != 1 {
		t.Fatalf("rows = %+v", rows)
	}
	r := rows[0]
	if r.Protocol != routestats.HTTP || r.Route.Name != "canary" || r.Parent.Port != "8080" || r.Requests != 102 || r.Timeouts != 2 || r.Retries != 18 || r.RetryOverflow != 0 {
		t.Errorf("row = %+v", r)
	}
	approx(t, "success", r.SuccessRate, 90.0/102)
	approx(t, "effective rps", r.RPS, 102.0/60)
	approx(t, "actual rps", r.ActualRPS, 2)
	approx(t, "p50", r.LatencyP50, 11.8) // rank 51 of 102: 1/50 into (10ms, 100ms]
	want := `label_replace(sum by (parent_group, parent_kind, parent_namespace, parent_name, parent_port, parent_section_name, route_group, route_kind, route_namespace, route_name, route_port, route_section_name, error) (increase(outbound_http_route_request_statuses_total{job="plexus-proxy",namespace="demo",workload_kind="Deployment",workload_name="web"}[1m])), "plexus_counter", "requests", "", "") or label_replace(sum by (parent_group, parent_kind, parent_namespace, parent_name, parent_port, parent_section_name, route_group, route_kind, route_namespace, route_name, route_port, route_section_name) (increase(outbound_http_route_request_statuses_total{job="plexus-proxy",namespace="demo",workload_kind="Deployment",workload_name="web",error="",http_status=~"[1-4][0-9][0-9]"}[1m])), "plexus_counter", "success", "", "")`
	if !strings.HasPrefix(httpQ, want) {
		t.Errorf("route query starts\n%s\nwant\n%s", httpQ[:min(len(httpQ), len(want))], want)
	}
	if g := qRoutes("grpc", f, time.Minute); !strings.Contains(g, `error="",grpc_status="0"`) || !strings.Contains(g, "outbound_grpc_route_retry_overflow_total") {
		t.Errorf("grpc query %s", g)
	}
}

func TestHealth(t *testing.T) {
	f := &fakeProm{answers: map[string]any{
		`count(up{job="plexus-proxy"})`: vec(L{}, "5"),
		`sum(up{job="plexus-proxy"})`:   vec(L{}, "4"),
	}}
	c := f.start(t)
	h, err := c.Health(ctx)
	if err != nil || h != (Health{Version: "3.6.0", ProxyTargets: 5, ProxyTargetsUp: 4}) {
		t.Fatalf("health %+v err %v", h, err)
	}
	down, err := New("http://127.0.0.1:1", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := down.Health(ctx); err == nil || !strings.Contains(err.Error(), "not reachable") {
		t.Errorf("err = %v, want not reachable", err)
	}
}

func TestInstalled(t *testing.T) {
	if ok, err := Installed(ctx, fake.NewClientset()); ok || err != nil {
		t.Errorf("empty cluster: %v %v", ok, err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: PrometheusService}}
	if ok, err := Installed(ctx, fake.NewClientset(svc)); !ok || err != nil {
		t.Errorf("installed: %v %v", ok, err)
	}
}
