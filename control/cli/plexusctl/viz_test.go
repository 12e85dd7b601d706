package plexusctl

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
)

func TestVizUsage(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{"help lists viz", []string{"-h"}, ExitOK, "viz          the viz extension"},
		{"help lists multicluster", []string{"-h"}, ExitOK, "multicluster the multicluster extension"},
		{"viz alone", []string{"viz"}, ExitUsage, "Usage:\n  plexusctl viz [flags]\n  plexusctl viz [command]"},
		{"viz help", []string{"viz", "-h"}, ExitOK, "allow-scrapes"},
		{"unknown", []string{"viz", "frob"}, ExitUsage, `unknown viz command "frob": want one of allow-scrapes, dashboard, edges`},
		{"tap no object", []string{"viz", "tap"}, ExitUsage, "want viz tap KIND/NAME (deploy/web), ns/NAME, or KIND -l SELECTOR"},
		{"tap kind alone", []string{"viz", "tap", "deploy"}, ExitUsage, `deploy names no object: want viz tap KIND/NAME`},
		{"tap unknown kind", []string{"viz", "tap", "widget/x"}, ExitUsage, `unknown kind "widget": want ns, po, deploy`},
		{"tap two objects", []string{"viz", "tap", "deploy/a", "deploy/b"}, ExitUsage, "want one object"},
		{"tap -A without -l", []string{"viz", "tap", "deploy", "-A"}, ExitUsage, "names no object"},
		{"tap bad output", []string{"viz", "tap", "deploy/web", "-o", "yaml"}, ExitUsage, `unknown output format "yaml": want wide or json`},
		{"tap bad direction", []string{"viz", "tap", "deploy/web", "--direction", "up", "--kubeconfig", missingKubeconfigFile(t)}, ExitUsage, `--direction "up": want inbound or outbound`},
		{"tap show authorization", []string{"viz", "tap", "deploy/web", "--show-header", "Authorization", "--kubeconfig", missingKubeconfigFile(t)}, ExitUsage, `--show-header "Authorization": authorization, cookie, proxy-authorization are always hidden`},
		{"tap bad --to", []string{"viz", "tap", "deploy/web", "--to", "deploy", "--kubeconfig", missingKubeconfigFile(t)}, ExitUsage, `--to "deploy"`},
		{"tap unknown flag", []string{"viz", "tap", "deploy/web", "--bogus"}, ExitUsage, "plexusctl viz tap: unknown flag: --bogus (see plexusctl viz tap --help)"},
		{"tap no kubeconfig", []string{"viz", "tap", "po/web-1", "--kubeconfig", missing}, ExitFail, "kubeconfig"},
		{"top with -o", []string{"viz", "top", "deploy/web", "-o", "json"}, ExitUsage, "top has no -o"},
		{"edges pods", []string{"viz", "edges", "po"}, ExitUsage, "edges are between workloads"},
		{"edges two kinds", []string{"viz", "edges", "deploy", "sts"}, ExitUsage, "want viz edges [KIND]"},
		{"edges short window", []string{"viz", "edges", "--window", "5s"}, ExitUsage, "--window 5s: Prometheus scrapes every 10s, want at least 20s"},
		{"routes no name", []string{"viz", "routes", "deploy"}, ExitUsage, `"deploy" names no object: want deploy/NAME`},
		{"routes service", []string{"viz", "routes", "svc/books"}, ExitUsage, "name the client"},
		{"stat bad resource", []string{"viz", "stat", "svc"}, ExitUsage, `unknown kind "svc"`},
		{"stat no resource", []string{"viz", "stat"}, ExitUsage, "want viz stat (ns|deploy|pod)"},
		{"allow-scrapes bad network", []string{"viz", "allow-scrapes", "-n", "shop", "--networks", "10.0.0.0/8,nope"}, ExitUsage, `--networks "nope"`},
		{"allow-scrapes host bits", []string{"viz", "allow-scrapes", "-n", "shop", "--networks", "10.1.2.3/8"}, ExitUsage, "no host bits"},
		{"install stray argument", []string{"viz", "install", "x"}, ExitUsage, "unexpected arguments [x]"},
		{"install bad trust domain", []string{"viz", "install", "--trust-domain", "B.example"}, ExitUsage, `--trust-domain "B.example" is not a lowercase DNS name`},
		{"dashboard bad show", []string{"viz", "dashboard", "--show", "tv"}, ExitUsage, `show "tv": want browser, url or none`},
		{"dashboard bad port", []string{"viz", "dashboard", "--port", "99999"}, ExitUsage, "port 99999"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, "", tc.args...)
			if code != tc.code || !strings.Contains(stdout+stderr, tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr, tc.code, tc.stderr)
			}
			if tc.code == ExitUsage && strings.Count(strings.TrimSpace(stderr), "\n") > 0 && !strings.Contains(stderr, "Usage:") {
				t.Errorf("a usage error of more than one line: %q", stderr)
			}
		})
	}
}

// missingKubeconfigFile is a kubeconfig of a cluster that is not there:
// the checks before connecting run, the connection is never made.
func missingKubeconfigFile(t *testing.T) string {
	return kubeconfig(t, "https://127.0.0.1:1")
}

// kubeconfig writes a kubeconfig for server (no credentials) and returns
// its path.
func kubeconfig(t *testing.T, server string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {}}]
contexts: [{name: x, context: {cluster: c, user: u, namespace: shop}}]
current-context: x
`, server)
	if err := os.WriteFile(p, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestVizInstallUninstallAllowScrapes(t *testing.T) {
	code, out, stderr := runMain(t, "", "viz", "install")
	if code != ExitOK || stderr != "" {
		t.Fatalf("install: exit %d, %s", code, stderr)
	}
	docs := strings.Split(out, "\n---\n")
	var first map[string]any
	if err := yaml.Unmarshal([]byte(docs[0]), &first); err != nil || first["kind"] != "Namespace" {
		t.Errorf("install starts with %v (%v), want the Namespace", first["kind"], err)
	}
	if !strings.Contains(out, "kind: APIService") || !strings.Contains(out, "name: plexus-tap") {
		t.Error("install lacks the tap service")
	}
	code, out, _ = runMain(t, "", "viz", "uninstall")
	if code != ExitOK || !strings.HasPrefix(out, "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\n") {
		t.Errorf("uninstall: exit %d, starts %q", code, out[:min(len(out), 80)])
	}
	code, out, _ = runMain(t, "", "viz", "allow-scrapes", "-n", "plexus-demo", "--networks", "10.42.0.0/16, fd00:42::/56")
	if code != ExitOK || strings.Count(out, "namespace: plexus-demo") != 4 || !strings.Contains(out, "cidr: fd00:42::/56") {
		t.Errorf("allow-scrapes: exit %d\n%s", code, out)
	}
}

// fakeTapAPI is an API server that serves taps: each tap of
// deployments/web answers events; forbidden refuses all of them as the
// API server does without RBAC.
type fakeTapAPI struct {
	forbidden bool
	mu        sync.Mutex
	taps      []string
	bodies    []tapapi.Request
}

func (f *fakeTapAPI) start(t *testing.T) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req tapapi.Request
		_ = json.NewDecoder(r.Body).Decode(&req)
		f.mu.Lock()
		f.taps = append(f.taps, r.Method+" "+r.URL.Path)
		f.bodies = append(f.bodies, req)
		f.mu.Unlock()
		if f.forbidden {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusForbidden)
			fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"deployments.tap.plexus.dev \"web\" is forbidden: User \"eve\" cannot watch resource \"deployments/tap\" in API group \"tap.plexus.dev\" in the namespace \"shop\"","reason":"Forbidden","code":403}`)
			return
		}
		w.Header().Set("Content-Type", "application/x-ndjson")
		bw := bufio.NewWriter(w)
		enc := json.NewEncoder(bw)
		peer := func(addr, pod string) tapapi.Peer { return tapapi.Peer{Addr: addr, Namespace: "shop", Pod: pod} }
		for i := range 3 {
			id := fmt.Sprintf("web-1:%d", i)
			base := tapapi.Event{ID: id, Namespace: "shop", Pod: "web-1", Direction: "inbound", Source: peer("10.0.0.1:4000", "load-1"), Destination: peer("10.0.0.2:8080", "web-1"), TLS: true, Time: time.Unix(0, 0).UTC()}
			req, rsp, end := base, base, base
			req.Type, req.Method, req.Authority, req.Path = tapapi.RequestStart, "GET", "web:80", "/books"
			rsp.Type, rsp.Status, rsp.LatencyMs = tapapi.ResponseStart, 200, 1.5
			end.Type, end.DurationMs, end.ResponseBytes = tapapi.ResponseEnd, 2, 10
			for _, ev := range []tapapi.Event{req, rsp, end} {
				_ = enc.Encode(ev)
			}
		}
		_ = bw.Flush()
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestVizTapAndTop(t *testing.T) {
	api := &fakeTapAPI{}
	kc := kubeconfig(t, api.start(t).URL)
	code, out, stderr := runMain(t, "", "viz", "tap", "deploy/web", "--kubeconfig", kc, "--method", "GET", "--path", "/books", "--to", "deploy/books", "--max-rate", "150",
		"--from", "deploy/load", "--from-namespace", "traffic", "--route", "books-get", "--redact-header", "x-api-key", "--redact-header", "x-token",
		"--to-selector", "track=stable", "--from-addr", "10.0.0.9", "--from-addr", "10.0.0.10",
		"--redact-query-param", "tenant", "--show-header", "x-csrf-token", "--show-query-param", "code", "--show-query-param", "state")
	if code != ExitOK {
		t.Fatalf("tap: exit %d: %s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 9 || lines[0] != "req id=web-1:0 proxy=in src=10.0.0.1:4000 dst=10.0.0.2:8080 tls=true :method=GET :authority=web:80 :path=/books" ||
		lines[1] != "rsp id=web-1:0 proxy=in src=10.0.0.1:4000 dst=10.0.0.2:8080 tls=true :status=200 latency=1500µs" {
		t.Errorf("tap lines:\n%s", out)
	}
	want := tapapi.Request{Method: "GET", PathPrefix: "/books", Route: "books-get", MaxEventRate: 150, RedactHeaders: []string{"x-api-key", "x-token"},
		RedactQueryParams: []string{"tenant"}, ShowHeaders: []string{"x-csrf-token"}, ShowQueryParams: []string{"code", "state"},
		ToNamespace: "shop", ToResource: "deployments", ToName: "books", ToSelector: "track=stable",
		FromNamespace: "traffic", FromResource: "deployments", FromName: "load", FromAddrs: []string{"10.0.0.9", "10.0.0.10"}}
	if api.taps[0] != "POST /apis/tap.plexus.dev/v1alpha1/watch/namespaces/shop/deployments/web/tap" || !reflect.DeepEqual(api.bodies[0], want) {
		t.Errorf("tapped %s with %+v, want %+v", api.taps[0], api.bodies[0], want)
	}

	code, out, _ = runMain(t, "", "viz", "tap", "ns/shop", "--kubeconfig", kc, "-o", "json")
	if code != ExitOK || strings.Count(out, `"type":"requestStart"`) != 3 || api.taps[1] != "POST /apis/tap.plexus.dev/v1alpha1/watch/namespaces/shop/tap" {
		t.Errorf("tap ns/shop -o json: exit %d, tapped %s:\n%s", code, api.taps[1], out)
	}

	// top, not on a terminal, with --limit: one table at the end.
	code, out, stderr = runMain(t, "", "viz", "top", "deploy/web", "--kubeconfig", kc, "--limit", "3", "--hide-sources")
	if code != ExitOK || strings.Count(out, "DESTINATION") != 1 || !strings.Contains(strings.Join(strings.Fields(out), " "), "web-1 GET /books 3 2ms 2ms 2ms 100.00%") {
		t.Errorf("top: exit %d, %s\n%s", code, stderr, out)
	}
	if api.bodies[2].Limit != 3 || api.bodies[2].MaxEventRate != tapapi.DefaultMaxEventRate {
		t.Errorf("top asked for limit %d at %v events/s, want 3 at the default %d", api.bodies[2].Limit, api.bodies[2].MaxEventRate, tapapi.DefaultMaxEventRate)
	}
}

func TestVizTapForbidden(t *testing.T) {
	kc := kubeconfig(t, (&fakeTapAPI{forbidden: true}).start(t).URL)
	code, _, stderr := runMain(t, "", "viz", "tap", "deploy/web", "--kubeconfig", kc)
	want := "plexusctl viz tap: not allowed to tap deploy/web in namespace shop: you need verb watch on resource deployments/tap in API group tap.plexus.dev (bind the ClusterRole plexus-viz-tap): tap refused (403)"
	if code != ExitFail || !strings.HasPrefix(stderr, want) || strings.Count(stderr, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want %d and %q on one line", code, stderr, ExitFail, want)
	}
}

func TestVizNotInstalled(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		fmt.Fprint(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"services \"plexus-prometheus\" not found","reason":"NotFound","code":404}`)
	}))
	defer srv.Close()
	kc := kubeconfig(t, srv.URL)
	for _, args := range [][]string{{"viz", "edges"}, {"viz", "routes", "deploy/web"}} {
		code, _, stderr := runMain(t, "", append(args, "--kubeconfig", kc)...)
		if code != ExitFail || !strings.Contains(stderr, "the viz extension is not installed (plexusctl viz install | kubectl apply -f -)") {
			t.Errorf("%v: exit %d, %q", args, code, stderr)
		}
	}
}

// fakeCluster is an API server with namespace shop holding deployment web
// (one meshed pod), and, when viz is set, the viz Prometheus behind the
// service proxy, answering every query with an empty vector.
type fakeCluster struct {
	viz   bool
	mu    sync.Mutex
	asked []string
}

func (f *fakeCluster) start(t *testing.T) *httptest.Server {
	t.Helper()
	obj := func(w http.ResponseWriter, status int, body string) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.asked = append(f.asked, r.Method+" "+r.URL.Path)
		f.mu.Unlock()
		const promPath = "/api/v1/namespaces/plexus-viz/services/http:plexus-prometheus:9090/proxy"
		switch p := r.URL.Path; {
		case p == "/api/v1/namespaces/plexus-viz/services/plexus-prometheus" && f.viz:
			obj(w, 200, `{"kind":"Service","apiVersion":"v1","metadata":{"name":"plexus-prometheus","namespace":"plexus-viz"}}`)
		case p == promPath+"/api/v1/query" && f.viz:
			obj(w, 200, `{"status":"success","data":{"resultType":"vector","result":[]}}`)
		case p == "/api/v1/namespaces/shop/pods":
			obj(w, 200, `{"kind":"PodList","apiVersion":"v1","items":[{"metadata":{"name":"web-1","namespace":"shop","labels":{"app":"web"}},"spec":{"containers":[{"name":"web"},{"name":"plexus-proxy"}]},"status":{"phase":"Pending"}}]}`)
		case p == "/apis/apps/v1/namespaces/shop/deployments":
			obj(w, 200, `{"kind":"DeploymentList","apiVersion":"apps/v1","items":[{"metadata":{"name":"web","namespace":"shop"},"spec":{"selector":{"matchLabels":{"app":"web"}},"template":{}}}]}`)
		default:
			obj(w, 404, `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"not found","reason":"NotFound","code":404}`)
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestVizStat(t *testing.T) {
	// Without viz: the proxies are scraped (none running here), with a note.
	f := &fakeCluster{}
	kc := kubeconfig(t, f.start(t).URL)
	code, out, stderr := runMain(t, "", "viz", "stat", "deploy", "--kubeconfig", kc, "--window", "100ms")
	if code != ExitOK || !strings.Contains(stderr, "the viz extension is not installed: scraping the proxies through the API server instead") ||
		strings.Join(strings.Fields(out), " ") != "NAME MESHED SUCCESS RPS LATENCY_P50 LATENCY_P95 LATENCY_P99 TLS web 1/1 - - - - - -" {
		t.Errorf("without viz: exit %d, stderr %q\n%s", code, stderr, out)
	}
	// With viz: Prometheus through the service proxy, no note.
	f = &fakeCluster{viz: true}
	kc = kubeconfig(t, f.start(t).URL)
	code, out, stderr = runMain(t, "", "viz", "stat", "deploy", "--kubeconfig", kc, "-o", "wide")
	if code != ExitOK || stderr != "" || !strings.Contains(strings.Join(strings.Fields(out), " "), "shop web 1/1 - - - - - - 0 -") {
		t.Errorf("with viz: exit %d, stderr %q\n%s", code, stderr, out)
	}
	queries := 0
	for _, a := range f.asked {
		if a == "POST /api/v1/namespaces/plexus-viz/services/http:plexus-prometheus:9090/proxy/api/v1/query" || a == "GET /api/v1/namespaces/plexus-viz/services/http:plexus-prometheus:9090/proxy/api/v1/query" {
			queries++
		}
	}
	if queries == 0 {
		t.Errorf("Prometheus never asked through the service proxy: %v", f.asked)
	}
	code, out, _ = runMain(t, "", "viz", "routes", "deploy/web", "--kubeconfig", kc)
	if code != ExitOK || strings.TrimSpace(out) != strings.Join(strings.Fields("ROUTE   SERVICE   SUCCESS   RPS   LATENCY_P50   LATENCY_P95   LATENCY_P99"), "   ") {
		t.Errorf("routes: exit %d\n%q", code, out)
	}
	code, out, stderr = runMain(t, "", "viz", "edges", "--kubeconfig", kc, "-o", "json")
	if code != ExitOK || strings.TrimSpace(out) != "[]" {
		t.Errorf("edges: exit %d, %s\n%q", code, stderr, out)
	}
}
