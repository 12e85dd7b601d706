package mesh

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/integration/vizbrowser"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
	"github.com/plexus-mesh/plexus/testsupport/vizprom"
	"github.com/plexus-mesh/plexus/viz/tapclient"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

const (
	demoNamespace = "plexus-demo"
	vizNamespace  = "plexus-viz"
)

// TestViz installs Plexus and the viz extension the way a user does, runs
// the demo application, and checks what a user debugging it would use:
// tap (and who may), Prometheus, edges, top and the dashboard.
func TestViz(t *testing.T) {
	env := clustercni.Read(t)
	c := clustertest.Connect(t)
	ctl, _ := installAllKeepingCNI(t, c, env)
	installViz(t, c, ctl)
	deployDemo(t, c)
	// books fails every 5th request: success rates worth comparing.
	c.Kubectl(t, "-n", demoNamespace, "patch", "deployment", "books", "--type=json",
		`-p=[{"op":"add","path":"/spec/template/spec/containers/0/args/-","value":"--fail=0.2"}]`)
	c.Kubectl(t, "-n", demoNamespace, "rollout", "status", "deployment/books", "--timeout=3m")
	failing := time.Now()

	t.Run("check", func(t *testing.T) { vizCheck(t, ctl) })
	t.Run("tap", func(t *testing.T) { vizTap(t, c, ctl) })
	t.Run("tap-rbac", func(t *testing.T) { vizTapRBAC(t, c) })
	t.Run("tap-port-refuses-other-identities", func(t *testing.T) { vizTapPort(t, c) })
	t.Run("prometheus", func(t *testing.T) { vizPrometheus(t, c, ctl, failing) })
	t.Run("edges-and-top", func(t *testing.T) { vizEdgesTop(t, ctl) })
	t.Run("dashboard", func(t *testing.T) { vizDashboard(t, c, ctl) })
	t.Run("dashboard-unreachable-from-pods", func(t *testing.T) { vizDashboardClosed(t, c) })
	t.Run("diagnostics", func(t *testing.T) { diagnostics(t, ctl) })
}

// diagnostics: plexusctl diagnostics shows a proxy's raw metrics through
// the API server and the endpoints destination publishes, identities
// included.
func diagnostics(t *testing.T, ctl plexusctl) {
	out, err := ctl("diagnostics", "proxy-metrics", "deploy/web", "-n", demoNamespace)
	if err != nil || !strings.Contains(out, "# POD "+demoNamespace+"/web-") || !strings.Contains(out, "response_total{") {
		t.Errorf("plexusctl diagnostics proxy-metrics deploy/web: %v\n%.500s", err, out)
	}
	// Asked of destination itself, through a port-forward to its pod
	// (loopback: no client certificate), its identity verified.
	out, err = ctl("diagnostics", "endpoints", "books."+demoNamespace+":8080", "--compare")
	if err != nil || !strings.Contains(out, "spiffe://cluster.local/ns/"+demoNamespace+"/sa/books") ||
		!strings.Contains(out, "1 endpoints published by destination (pod "+controlNamespace+"/plexus-destination-") ||
		!strings.Contains(out, "destination and the EndpointSlices agree") {
		t.Errorf("plexusctl diagnostics endpoints books: %v\n%s", err, out)
	}
}

// vizCheck: plexusctl check passes with the viz extension's lines,
// Prometheus scraping every meshed pod among them.
func vizCheck(t *testing.T, ctl plexusctl) {
	var out string
	clustertest.WaitFor(t, 2*time.Minute, "plexusctl check to pass with the viz extension", func(context.Context) (bool, error) {
		var err error
		out, err = ctl("check")
		return err == nil, nil
	})
	for _, want := range []string{"viz Deployment plexus-tap is available", "viz Deployment plexus-prometheus is available",
		"viz Deployment plexus-web is available", "tap API (APIService v1alpha1.tap.plexus.dev) is available",
		"Prometheus scrapes every meshed pod's proxy"} {
		if !strings.Contains(out, want) {
			t.Errorf("plexusctl check lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "✘") {
		t.Errorf("plexusctl check passed with a failure:\n%s", out)
	}
}

// prometheus returns a client of the viz Prometheus through the API
// server's service proxy, with the test's credentials.
func prometheus(t *testing.T, c *clustertest.Cluster) (*vizquery.Client, string, *http.Client) {
	t.Helper()
	hc, err := rest.HTTPClientFor(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSuffix(c.Config.Host, "/") + "/api/v1/namespaces/" + vizNamespace + "/services/http:plexus-prometheus:9090/proxy"
	pc, err := vizquery.New(url, hc.Transport)
	if err != nil {
		t.Fatal(err)
	}
	return pc, url, hc
}

// vizPrometheus: every meshed pod is a healthy target with its workload
// labels; the success rate Prometheus computes equals plexusctl stat's
// within a point; every Grafana dashboard query runs.
func vizPrometheus(t *testing.T, c *clustertest.Cluster, ctl plexusctl, failing time.Time) {
	pc, url, hc := prometheus(t, c)
	ctx := clustertest.Context(t, 3*time.Minute)
	clustertest.WaitFor(t, time.Minute, "Prometheus to scrape every demo proxy", func(ctx context.Context) (bool, error) {
		rows, err := pc.Golden(ctx, vizquery.ByWorkload, vizquery.Filter{Namespace: demoNamespace}, time.Minute)
		if err != nil {
			return false, nil
		}
		up := map[string]bool{}
		for _, r := range rows {
			up[r.WorkloadName] = r.Pods > 0 && r.PodsUp == r.Pods && r.WorkloadKind == "Deployment"
		}
		return up["web"] && up["books"] && up["votes"] && up["load"], nil
	})

	// Compare once Prometheus's window holds only the failing books.
	const window = 30 * time.Second
	if wait := time.Until(failing.Add(window + 15*time.Second)); wait > 0 {
		time.Sleep(wait) // Sleep: Prometheus's window must pass; its rate has no event
	}
	out, err := ctl("stat", "deploy", "-n", demoNamespace, "--window", "20s", "-o", "json")
	if err != nil {
		t.Fatalf("plexusctl stat: %v\n%s", err, out)
	}
	var stats []struct {
		Name        string   `json:"name"`
		SuccessRate *float64 `json:"successRate"`
	}
	if err := json.Unmarshal([]byte(out), &stats); err != nil {
		t.Fatalf("plexusctl stat -o json: %v\n%s", err, out)
	}
	rows, err := pc.Golden(ctx, vizquery.ByWorkload, vizquery.Filter{Namespace: demoNamespace}, window)
	if err != nil {
		t.Fatal(err)
	}
	compared := 0
	for _, s := range stats {
		for _, r := range rows {
			if r.WorkloadName != s.Name || s.SuccessRate == nil || r.SuccessRate == nil {
				continue
			}
			compared++
			t.Logf("%s: success rate %.2f %% from plexusctl stat, %.2f %% from Prometheus", s.Name, *s.SuccessRate*100, *r.SuccessRate*100)
			if d := *s.SuccessRate - *r.SuccessRate; d > 0.01 || d < -0.01 {
				t.Errorf("%s: success rate %.4f from plexusctl stat, %.4f from Prometheus: more than a point apart", s.Name, *s.SuccessRate, *r.SuccessRate)
			}
			if s.Name == "books" && (*r.SuccessRate > 0.85 || *r.SuccessRate < 0.75) {
				t.Errorf("books: Prometheus success rate %.4f, want about 0.8 (it fails every 5th request)", *r.SuccessRate)
			}
		}
	}
	if compared < 3 {
		t.Errorf("compared %d workloads' success rates, want web, books and votes: stat %s; Prometheus %+v", compared, out, rows)
	}
	// plexusctl viz stat answers from Prometheus.
	if out, err := ctl("viz", "stat", "deploy", "-n", demoNamespace); err != nil || !strings.Contains(out, "books") {
		t.Errorf("plexusctl viz stat: %v\n%s", err, out)
	}
	// Every query of the Grafana dashboards runs.
	rs, err := vizprom.Run(ctx, hc, url, os.DirFS("../../deploy/plexus-viz/grafana"), vizprom.Vars(demoNamespace, "Deployment", "web"))
	if err != nil {
		t.Fatal(err)
	}
	withData := 0
	for _, r := range rs {
		if r.Err != nil {
			t.Errorf("dashboard query %s: %v", r.Query, r.Err)
		} else if r.Series > 0 {
			withData++
		}
	}
	if withData < len(rs)/2 {
		t.Errorf("only %d of %d dashboard queries found data for the demo", withData, len(rs))
	}
}

// vizEdgesTop: edges lists load→web, web→books and web→votes, each
// secured with the right identities; top shows the hottest paths.
func vizEdgesTop(t *testing.T, ctl plexusctl) {
	var out string
	var err error
	want := map[string][2]string{"load web": {"load", "web"}, "web books": {"web", "books"}, "web votes": {"web", "votes"}}
	clustertest.WaitFor(t, time.Minute, "plexusctl viz edges to list the demo's edges", func(context.Context) (bool, error) {
		out, err = ctl("viz", "edges", "deploy", "-n", demoNamespace, "-o", "json")
		if err != nil {
			return false, nil
		}
		var edges []map[string]any
		if json.Unmarshal([]byte(out), &edges) != nil {
			return false, nil
		}
		found := 0
		for _, e := range edges {
			text := fmt.Sprint(e)
			for _, w := range want {
				if strings.Contains(text, "/sa/"+w[0]) && strings.Contains(text, "/sa/"+w[1]) {
					found++
				}
			}
		}
		return found >= len(want), nil
	})
	table, err := ctl("viz", "edges", "deploy", "-n", demoNamespace)
	if err != nil {
		t.Fatalf("plexusctl viz edges: %v\n%s", err, table)
	}
	t.Logf("plexusctl viz edges:\n%s", table)
	for pair := range want {
		f := strings.Fields(pair)
		found := false
		for _, line := range strings.Split(table, "\n") {
			cols := strings.Fields(line)
			if len(cols) >= 2 && strings.HasSuffix(cols[0], f[0]) && strings.HasSuffix(cols[1], f[1]) {
				found = true
				if !strings.Contains(line, "√") {
					t.Errorf("edge %s is not secured: %s", pair, line)
				}
			}
		}
		if !found {
			t.Errorf("no edge %s in:\n%s", pair, table)
		}
	}

	top, err := ctl("viz", "top", "deploy/web", "-n", demoNamespace, "--limit", "40")
	if err != nil {
		t.Fatalf("plexusctl viz top: %v\n%s", err, top)
	}
	t.Logf("plexusctl viz top:\n%s", top)
	for _, w := range []string{"/books", "/demo.Votes/Vote"} {
		if !strings.Contains(top, w) {
			t.Errorf("plexusctl viz top does not show %s:\n%s", w, top)
		}
	}
}

// vizDashboard drives the dashboard, reached as a user does (plexusctl
// viz dashboard: a port-forward), in Chromium: every page renders without
// console errors, the workload table matches plexusctl stat, the topology
// has the demo's edges, the tap view shows requests, and a forged Host is
// refused. Screenshots go to $PLEXUS_TEST_ARTIFACTS/dashboard (default
// .test-artifacts/dashboard at the repository's root).
func vizDashboard(t *testing.T, c *clustertest.Cluster, ctl plexusctl) {
	if err := vizbrowser.Available(""); err != nil {
		t.Skip(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Getenv("PLEXUSCTL_BIN"), "--kubeconfig", c.Kubeconfig, "viz", "dashboard", "--port", port, "--show", "url")
	var logs strings.Builder
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); cmd.Wait() }()
	base := "http://localhost:" + port
	clustertest.WaitFor(t, time.Minute, "plexusctl viz dashboard to forward "+base, func(ctx context.Context) (bool, error) {
		res, err := http.Get(base + "/")
		if err != nil {
			return false, nil
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK, nil
	})
	if !strings.Contains(logs.String(), base) {
		t.Errorf("plexusctl viz dashboard did not print the URL %s: %s", base, logs.String())
	}
	dir := os.Getenv("PLEXUS_TEST_ARTIFACTS")
	if dir == "" {
		dir = "../../.test-artifacts" // kept after the run (ignored by git)
	}
	res, err := vizbrowser.Run(ctx, vizbrowser.Config{BaseURL: base, Namespace: demoNamespace, Workload: "Deployment/web",
		MinWorkloads: 4, Edges: [][2]string{{"load", "web"}, {"web", "books"}, {"web", "votes"}},
		// Filtered to requests from load: web's own outbound requests,
		// from web, must not show.
		TapWithin: 30 * time.Second, TapRows: 3, TapFrom: "app=load", TapFromWorkload: demoNamespace + "/load",
		ArtifactsDir: filepath.Join(dir, "dashboard")})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("dashboard: %d workloads, edges %v, %d tap rows, screenshots %v", len(res.Workloads), res.Edges, res.TapRows, res.Screenshots)
	out, err := ctl("stat", "deploy", "-n", demoNamespace, "--window", "30s", "-o", "json")
	if err != nil {
		t.Fatalf("plexusctl stat: %v\n%s", err, out)
	}
	var stats []stat.Row
	if err := json.Unmarshal([]byte(out), &stats); err != nil {
		t.Fatalf("plexusctl stat -o json: %v\n%s", err, out)
	}
	compared := compareDashboard(t, stats, res.Workloads)
	if !slices.Equal(compared, []string{"books", "votes", "web"}) {
		t.Errorf("compared the dashboard with plexusctl stat for %v, want books, votes and web: stat %s; dashboard %+v", compared, out, res.Workloads)
	}
}

// compareDashboard checks the dashboard's workload rows against
// plexusctl stat's and returns the workloads it compared. The two measure
// different windows (the dashboard the last minute from Prometheus, stat
// 30 s from the proxies after it) of the demo's steady load, so success
// rates may differ by 2 points, rates by 25 %, p50 (the same histogram
// buckets, interpolated) by half or 1 ms. A p99 rests on the slowest
// 1 % of a window (about ten requests a minute here), so one CPU stall in
// either window moves it across buckets (CI runs: 4.0 against 2.0 ms, and
// on a slower machine web's 93.0 against 19.9 ms): it may differ by a
// factor of 10 or 3 ms, which still catches a wrong unit; a wrong series
// shows in the other figures.
func compareDashboard(t *testing.T, stats []stat.Row, rows []vizbrowser.WorkloadRow) []string {
	t.Helper()
	near := func(a, b, rel, abs float64) bool { return math.Abs(a-b) <= max(rel*max(a, b), abs) }
	var compared []string
	for _, s := range stats {
		i := slices.IndexFunc(rows, func(w vizbrowser.WorkloadRow) bool { return w.Workload == "Deployment/"+s.Name })
		if i < 0 || s.SuccessRate == nil {
			continue
		}
		w := rows[i]
		if w.SuccessRate == nil || w.RPS == nil || w.P50 == nil || w.P99 == nil || s.RPS == nil || s.LatencyP50 == nil || s.LatencyP99 == nil {
			t.Errorf("%s: plexusctl stat measured it (%+v) but the dashboard row lacks figures: %v", s.Name, s.Stats, w.Cells)
			continue
		}
		compared = append(compared, s.Name)
		t.Logf("%s: dashboard success %.4f, %.2f RPS, p50 %.1f ms, p99 %.1f ms; plexusctl stat %.4f, %.2f RPS, p50 %.1f ms, p99 %.1f ms",
			s.Name, *w.SuccessRate, *w.RPS, *w.P50, *w.P99, *s.SuccessRate, *s.RPS, *s.LatencyP50, *s.LatencyP99)
		for _, c := range []struct {
			what      string
			dash, cli float64
			rel, abs  float64
		}{
			{"success rate", *w.SuccessRate, *s.SuccessRate, 0, 0.02},
			{"RPS", *w.RPS, *s.RPS, 0.25, 0},
			{"p50 (ms)", *w.P50, *s.LatencyP50, 0.5, 1},
			{"p99 (ms)", *w.P99, *s.LatencyP99, 0.9, 3},
		} {
			if !near(c.dash, c.cli, c.rel, c.abs) {
				t.Errorf("%s: the dashboard shows %s %.4f, plexusctl stat %.4f", s.Name, c.what, c.dash, c.cli)
			}
		}
	}
	return compared
}

// installViz applies `plexusctl viz install` (with args), waits for its
// parts, and removes them when the test ends.
func installViz(t *testing.T, c *clustertest.Cluster, ctl plexusctl, args ...string) {
	t.Helper()
	manifests, err := ctl(append([]string{"viz", "install"}, args...)...)
	if err != nil {
		t.Fatalf("plexusctl viz install: %v\n%s", err, manifests)
	}
	file := filepath.Join(t.TempDir(), "viz.yaml")
	if err := os.WriteFile(file, []byte(manifests), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.Dump(t, vizNamespace)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		exec.CommandContext(ctx, os.Getenv(clustertest.EnvKubectl), "--kubeconfig", c.Kubeconfig,
			"delete", "--ignore-not-found", "--wait=true", "-f", file).Run()
	})
	c.Kubectl(t, "apply", "-f", file)
	for _, d := range []string{"plexus-tap", "plexus-prometheus", "plexus-web"} {
		c.WaitDeploymentReady(t, vizNamespace, d, 3*time.Minute)
	}
	clustertest.WaitFor(t, time.Minute, "the tap APIService to be Available", func(context.Context) (bool, error) {
		out, err := kubectl(t, c, "get", "apiservice", "v1alpha1.tap.plexus.dev", "-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
		return err == nil && out == "True", nil
	})
}

// deployDemo runs the demo application (integration/demo/app.yaml) and
// deletes it when the test ends.
func deployDemo(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	t.Cleanup(func() {
		if t.Failed() {
			c.Dump(t, demoNamespace)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c.Client.CoreV1().Namespaces().Delete(ctx, demoNamespace, metav1.DeleteOptions{})
	})
	c.Kubectl(t, "apply", "-f", "../demo/app.yaml")
	for _, d := range []string{"books", "votes", "web", "load"} {
		c.WaitDeploymentReady(t, demoNamespace, d, 3*time.Minute)
	}
}

// tapEvents taps resource/name in the demo namespace as cfg's user until n
// requests ended or the time is up.
func tapEvents(t *testing.T, cfg *rest.Config, resource, name string, req tapapi.Request, n int) ([]tapapi.Event, error) {
	t.Helper()
	return tapEventsIn(cfg, demoNamespace, resource, name, req, n)
}

// tapEventsIn is tapEvents in namespace ns.
func tapEventsIn(cfg *rest.Config, ns, resource, name string, req tapapi.Request, n int) ([]tapapi.Event, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req.Limit = n
	var evs []tapapi.Event
	err := tapclient.Stream(ctx, cfg, ns, resource, name, req, func(e tapapi.Event) error {
		evs = append(evs, e)
		return nil
	})
	return evs, err
}

// vizTap: `plexusctl viz tap deploy/web` shows the demo's live requests,
// and filters narrow them.
func vizTap(t *testing.T, c *clustertest.Cluster, ctl plexusctl) {
	evs, err := tapEvents(t, c.Config, "deployments", "web", tapapi.Request{}, 10)
	if err != nil {
		t.Fatal(err)
	}
	ends := map[string]tapapi.Event{}
	starts := map[string]tapapi.Event{}
	for _, e := range evs {
		switch e.Type {
		case tapapi.RequestStart:
			starts[e.ID] = e
		case tapapi.ResponseEnd:
			ends[e.ID] = e
		case tapapi.Error:
			t.Errorf("tap error: %+v", e)
		}
	}
	if len(ends) < 10 {
		t.Fatalf("%d requests ended in the tap, want 10: %+v", len(ends), evs)
	}
	seen := map[string]bool{}
	ok200 := 0
	for id, end := range ends {
		s, ok := starts[id]
		if !ok {
			continue
		}
		// books fails every 5th request (503), and web answers 502 then.
		if end.Status != 200 && end.Status != 502 && end.Status != 503 || end.DurationMs <= 0 || !s.TLS {
			t.Errorf("request %s %s %s ended %+v", s.Direction, s.Method, s.Path, end)
		}
		if end.Status == 200 {
			ok200++
		}
		seen[s.Direction+" "+s.Method+" "+s.Authority+s.Path] = true
		if s.Direction == "inbound" && (s.Source.WorkloadName != "load" || !strings.HasSuffix(s.Source.Identity, "/sa/load")) {
			t.Errorf("inbound request from %+v, want the load generator's pod and identity", s.Source)
		}
	}
	if ok200 == 0 {
		t.Errorf("no request in the tap ended 200")
	}
	for _, want := range []string{"inbound GET web.plexus-demo.svc.cluster.local:8080/", "outbound GET books.plexus-demo.svc.cluster.local:8080/books",
		"outbound POST votes.plexus-demo.svc.cluster.local:9090/demo.Votes/Vote"} {
		if !seen[want] {
			t.Errorf("no %q in the tap: %v", want, seen)
		}
	}

	// Filters narrow: outbound to books only.
	evs, err = tapEvents(t, c.Config, "deployments", "web", tapapi.Request{Direction: "outbound", ToNamespace: demoNamespace,
		ToResource: "deployments", ToName: "books", PathPrefix: "/books"}, 5)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs {
		if e.Type != tapapi.RequestStart {
			continue
		}
		n++
		if e.Direction != "outbound" || e.Destination.WorkloadName != "books" || e.Path != "/books" {
			t.Errorf("filtered tap let through %s %s to %+v", e.Direction, e.Path, e.Destination)
		}
	}
	if n == 0 {
		t.Error("the filtered tap saw no request")
	}

	// The CLI's --from: a tap of the namespace's inbound requests from
	// web sees only books' and votes' proxies (web's own inbound requests
	// come from load).
	out, err := ctl("viz", "tap", "ns/"+demoNamespace, "--direction", "inbound", "--from", "deploy/web", "--limit", "4", "-o", "json")
	if err != nil {
		t.Fatalf("plexusctl viz tap --from: %v\n%s", err, out)
	}
	n = 0
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		var e tapapi.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("plexusctl viz tap -o json: %q: %v", line, err)
		}
		if e.Type != tapapi.RequestStart {
			continue
		}
		n++
		if e.Source.WorkloadName != "web" || strings.HasPrefix(e.Pod, "web-") {
			t.Errorf("tap --from deploy/web let through a request from %+v to pod %s", e.Source, e.Pod)
		}
	}
	if n == 0 {
		t.Errorf("tap --from deploy/web saw no request:\n%s", out)
	}

	// The CLI: live lines with method, path, status and latency.
	out, err = ctl("viz", "tap", "deploy/web", "-n", demoNamespace, "--path", "/books", "--limit", "3")
	if err != nil {
		t.Fatalf("plexusctl viz tap: %v\n%s", err, out)
	}
	for _, want := range []string{"req ", ":method=GET", ":path=/books", "rsp ", ":status=200", "latency=", "end "} {
		if !strings.Contains(out, want) {
			t.Errorf("plexusctl viz tap output lacks %q:\n%s", want, out)
		}
	}
}

// vizTapRBAC: the API server refuses a tap to a user without watch on
// deployments/tap, and allows it once the user is bound to plexus-viz-tap.
func vizTapRBAC(t *testing.T, c *clustertest.Cluster) {
	ctx := clustertest.Context(t, time.Minute)
	as := func(user string) *rest.Config {
		cfg := rest.CopyConfig(c.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		return cfg
	}
	// A Role that may read pods but not tap.
	role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "pod-reader", Namespace: demoNamespace},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}}}}
	if _, err := c.Client.RbacV1().Roles(demoNamespace).Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bind := func(name, user, kind, roleName string) {
		rb := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: demoNamespace},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: user, APIGroup: rbacv1.GroupName}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: kind, Name: roleName}}
		if _, err := c.Client.RbacV1().RoleBindings(demoNamespace).Create(ctx, rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	bind("reader", "reader", "Role", "pod-reader")
	bind("tapper", "tapper", "ClusterRole", "plexus-viz-tap")
	// The API server's RBAC authorizer learns of a binding from its
	// watch: wait until it lets the tapper tap, or a refusal below could
	// be that delay's.
	clustertest.WaitFor(t, 30*time.Second, "RBAC to let tapper tap deployments in "+demoNamespace, func(ctx context.Context) (bool, error) {
		r, err := c.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: "tapper", ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: demoNamespace, Verb: tapapi.Verb,
				Group: tapapi.Group, Resource: "deployments", Subresource: tapapi.Subresource}}}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, err
	})

	_, err := tapEvents(t, as("reader"), "deployments", "web", tapapi.Request{}, 1)
	if !tapclient.IsForbidden(err) {
		t.Errorf("a user without watch on deployments/tap: %v, want 403", err)
	} else if !strings.Contains(err.Error(), "tap.plexus.dev") {
		t.Errorf("the 403 does not name the API group: %v", err)
	}
	evs, err := tapEvents(t, as("tapper"), "deployments", "web", tapapi.Request{}, 1)
	if err != nil || len(evs) == 0 {
		t.Errorf("a user bound to plexus-viz-tap: %v, %d events", err, len(evs))
	}
	// The binding is namespaced: another namespace stays closed.
	cfg := as("tapper")
	err = tapclient.Stream(ctx, cfg, "plexus-system", "namespaces", "", tapapi.Request{Limit: 1}, func(tapapi.Event) error { return nil })
	if !tapclient.IsForbidden(err) {
		t.Errorf("tapping plexus-system as a user bound in %s: %v, want 403", demoNamespace, err)
	}
}

// vizTapPort: a proxy's tap port refuses a client with another mesh
// identity (a certificate from the mesh's own issuer) and one with none.
func vizTapPort(t *testing.T, c *clustertest.Cluster) {
	ctx := clustertest.Context(t, time.Minute)
	ps, err := c.Client.CoreV1().Pods(demoNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app=web"})
	if err != nil || len(ps.Items) == 0 {
		t.Fatalf("web pods: %v", err)
	}
	addr := net.JoinHostPort(ps.Items[0].Status.PodIP, "4190")
	other := mintLeaf(t, c, "spiffe://cluster.local/ns/plexus-demo/sa/load")
	for name, certs := range map[string][]tls.Certificate{"another identity": {other}, "no certificate": nil} {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr,
			&tls.Config{InsecureSkipVerify: true, Certificates: certs, NextProtos: []string{"h2"}})
		if err == nil {
			// TLS 1.3: the server's verdict on the client arrives with the
			// first read.
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = conn.Read(make([]byte, 1))
			conn.Close()
		}
		var ne net.Error
		if err == nil || errors.As(err, &ne) && ne.Timeout() {
			t.Errorf("%s: the tap port let the client in (%v)", name, err)
		} else {
			t.Logf("%s: refused: %v", name, err)
		}
	}
}

// vizDashboardClosed: the dashboard's pages and live tap carry its
// service account's cluster-wide rights, so nothing but a port-forward
// may reach them. A client on the pod network (as any pod is) that forges
// Host: localhost gets no page and no tap, neither at the pod's address
// nor through a Service; the admin port (health and Go metrics) answers.
func vizDashboardClosed(t *testing.T, c *clustertest.Cluster) {
	ctx := clustertest.Context(t, time.Minute)
	ps, err := c.Client.CoreV1().Pods(vizNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=plexus-web"})
	if err != nil || len(ps.Items) == 0 {
		t.Fatalf("dashboard pods: %v", err)
	}
	ip := ps.Items[0].Status.PodIP
	client := &http.Client{Timeout: 5 * time.Second}
	get := func(url string) (int, error) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Host = "localhost"
		res, err := client.Do(req)
		if err != nil {
			return 0, err
		}
		res.Body.Close()
		return res.StatusCode, nil
	}
	for _, path := range []string{"/", "/api/tap?namespace=" + demoNamespace + "&resource=deployments&name=web", "/namespaces/" + demoNamespace} {
		if code, err := get("http://" + net.JoinHostPort(ip, "8084") + path); err == nil {
			t.Errorf("GET %s at the dashboard pod's address with a forged Host: %d, want no connection", path, code)
		} else {
			t.Logf("GET %s at %s: %v", path, ip, err)
		}
	}
	svcs, err := c.Client.CoreV1().Services(vizNamespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range svcs.Items {
		if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(ps.Items[0].Labels)) {
			t.Errorf("Service %s selects the dashboard's pods", s.Name)
		}
	}
	if code, err := get("http://" + net.JoinHostPort(ip, "9994") + "/ready"); err != nil || code != http.StatusOK {
		t.Errorf("the dashboard's admin port /ready: %d %v, want 200", code, err)
	}
}

// mintLeaf issues a client certificate for id from the mesh's issuer.
func mintLeaf(t *testing.T, c *clustertest.Cluster, id string) tls.Certificate {
	t.Helper()
	s, err := c.Client.CoreV1().Secrets(controlNamespace).Get(context.Background(), "plexus-identity-issuer", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := tls.X509KeyPair(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(issuer.Certificate[0])
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	u, _ := url.Parse(id)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), URIs: []*url.URL{u},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, issuer.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	chain := append([][]byte{der}, issuer.Certificate...)
	return tls.Certificate{Certificate: chain, PrivateKey: key}
}
