package dashboard_test

import (
	"bufio"
	"context"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/viz/dashboard"
	"github.com/plexus-mesh/plexus/viz/dashboard/webtest"
)

func newServer(t *testing.T, mod func(*dashboard.Config, *dashboard.Sources)) *httptest.Server {
	t.Helper()
	cfg := dashboard.DefaultConfig()
	src := webtest.Sources(20 * time.Millisecond)
	if mod != nil {
		mod(&cfg, &src)
	}
	s, err := dashboard.New(cfg, src, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts
}

// get fetches path with Host host ("" keeps 127.0.0.1:port).
func get(t *testing.T, ts *httptest.Server, host, path string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, ts.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res, string(b)
}

func TestPages(t *testing.T) {
	ts := newServer(t, nil)
	for _, c := range []struct {
		path string
		want []string
	}{
		{"/", []string{`id="namespaces"`, `data-namespace="plexus-demo"`, "99.00%", "Prometheus 3.16.0 scrapes 8 of 8 proxies"}},
		{"/namespaces/plexus-demo", []string{`id="workloads"`, `data-workload="Deployment/web"`, `data-workload="Deployment/books"`, `<svg class="spark success"`, `<path d="M0.0 `, "/tap?namespace=plexus-demo&amp;resource=namespaces"}},
		{"/namespaces/plexus-demo/workloads/Deployment/web", []string{`id="golden"`, `data-pod="web-7d9f-0"`, "plexus-demo/HTTPRoute/books-canary", "plexus-demo/books:8080", "98.33%", "resource=deployments"}},
		{"/namespaces/plexus-demo/topology", []string{`<svg id="topology"`, `data-source="plexus-demo/Deployment/load" data-destination="plexus-demo/Deployment/web" data-secured="true"`, `class="edge plain"`, "spiffe://cluster.local/ns/plexus-demo/sa/web"}},
		{"/namespaces/empty/topology", []string{`id="no-edges"`}},
		{"/tap", []string{`id="tap-form"`, "Choose what to tap"}},
		{"/tap?namespace=plexus-demo&resource=deployments&name=web&method=get&path=/books", []string{`data-stream="/api/tap?method=GET&amp;name=web&amp;namespace=plexus-demo&amp;path=%2Fbooks&amp;resource=deployments"`, `value="/books"`, `<option selected>deployments</option>`}},
		{"/tap?namespace=plexus-demo&resource=deployments&name=web&from=app%3Dload", []string{`data-stream="/api/tap?from=app%3Dload&amp;name=web&amp;namespace=plexus-demo&amp;resource=deployments"`, `name="from" value="app=load"`}},
		{"/controlplane", []string{`id="checks"`, "All checks passed.", `class="check warn"`, "✔ Prometheus 3.16.0 answers"}},
		{"/static/app.css", []string{"svg.topology"}},
		{"/static/tap.js", []string{"EventSource"}},
	} {
		res, body := get(t, ts, "", c.path)
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %s\n%s", c.path, res.Status, body)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s lacks %q", c.path, w)
			}
		}
		if strings.HasSuffix(c.path, ".css") || strings.HasSuffix(c.path, ".js") {
			continue
		}
		if !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			t.Errorf("GET %s: Content-Type %q", c.path, res.Header.Get("Content-Type"))
		}
		if bad := inline(body); bad != "" {
			t.Errorf("GET %s has inline script or style: %s", c.path, bad)
		}
	}
}

// inline finds a script without src, a style element or attribute, an
// event handler attribute or a javascript: URL in an HTML text.

func inline(html string) string {
	for _, m := range regexp.MustCompile(`(?is)<script[^>]*>`).FindAllString(html, -1) {
		if !strings.Contains(m, " src=") {
			return m
		}
	}
	return regexp.MustCompile(`(?i)<style|\sstyle\s*=|\son[a-z]+\s*=|javascript:`).FindString(html)
}

func TestTemplatesHaveNoInlineScriptOrStyle(t *testing.T) {
	err := filepath.WalkDir("templates", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bad := inline(string(b)); bad != "" {
			t.Errorf("%s: inline script or style: %s", p, bad)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if inline(`<script>alert(1)</script>`) == "" || inline(`<p style="x">`) == "" || inline(`<a onclick="x">`) == "" || inline(`<script src="/static/a.js"></script>`) != "" {
		t.Error("the inline detector is broken")
	}
}

func TestSecurityHeadersOnEveryResponse(t *testing.T) {
	ts := newServer(t, nil)
	for _, c := range []struct {
		host, path string
		status     int
	}{
		{"", "/", 200},
		{"", "/static/app.js", 200},
		{"", "/nowhere", 404},
		{"", "/namespaces/Bad_Name", 400},
		{"", "/api/tap?namespace=x&resource=pods&name=../../secrets", 400},
		{"", "/api/tap?namespace=x&from=app+in+(load", 400},
		{"", "/api/tap?namespace=x&authority=a/b", 400},
		{"evil.example.com", "/", 403},
		{"", "/tap?namespace=plexus-demo", 200},
	} {
		res, body := get(t, ts, c.host, c.path)
		if res.StatusCode != c.status {
			t.Errorf("GET %s (Host %q): %s, want %d\n%s", c.path, c.host, res.Status, c.status, body)
		}
		if got := res.Header.Get("Content-Security-Policy"); got != dashboard.CSP {
			t.Errorf("GET %s: CSP %q", c.path, got)
		}
		for h, want := range map[string]string{"X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer", "X-Frame-Options": "DENY"} {
			if got := res.Header.Get(h); got != want {
				t.Errorf("GET %s: %s %q, want %q", c.path, h, got, want)
			}
		}
	}
	if !strings.Contains(dashboard.CSP, "default-src 'none'") || !strings.Contains(dashboard.CSP, "script-src 'self';") || strings.Contains(dashboard.CSP, "unsafe") {
		t.Errorf("CSP %q", dashboard.CSP)
	}
	req, _ := http.NewRequest(http.MethodPost, ts.URL+"/", strings.NewReader("x"))
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed || res.Header.Get("Content-Security-Policy") == "" {
		t.Errorf("POST /: %s", res.Status)
	}
}

func TestHostAllowList(t *testing.T) {
	ts := newServer(t, func(c *dashboard.Config, _ *dashboard.Sources) { c.AllowedHosts = `dash\.example\.com|.*\.corp` })
	for host, ok := range map[string]bool{
		"localhost": true, "localhost:8084": true, "127.0.0.1:50123": true, "[::1]:8084": true, "[::1]": true, "LOCALHOST.": true,
		// The Service's names are not allowed by default: other pods would
		// reach the dashboard (and its tap) through them.
		"plexus-web:8084": false, "plexus-web.plexus-viz": false, "plexus-web.plexus-viz.svc:8084": false, "plexus-web.plexus-viz.svc.cluster.local": false,
		"dash.example.com": true, "a.b.corp:443": true,
		"evil.example.com": false, "dash.example.com.evil.net": false, "xdash.example.com": false, "127.0.0.2": false, "10.0.0.1:8084": false,
		"plexus-web.other": false, "localhost.evil.net": false, "": false,
	} {
		res, body := get(t, ts, host, "/")
		if host == "" {
			// net/http sends the URL's host when Host is empty: use a raw request.
			continue
		}
		if got := res.StatusCode == http.StatusOK; got != ok {
			t.Errorf("Host %q: %s, want allowed %v", host, res.Status, ok)
		}
		if !ok && (!strings.Contains(body, "DNS rebinding") || !strings.Contains(body, host)) {
			t.Errorf("Host %q refused without naming the problem: %s", host, body)
		}
	}
	if _, err := dashboard.New(dashboard.Config{AllowedHosts: "("}, webtest.Sources(time.Second), slog.Default()); err == nil {
		t.Error("a bad --allowed-hosts regex was accepted")
	}
}

func TestBrokenPrometheusShowsTheError(t *testing.T) {
	ts := newServer(t, nil)
	res, body := get(t, ts, "", "/namespaces/broken")
	if res.StatusCode != 200 || !strings.Contains(body, `class="error"`) || !strings.Contains(body, "connection refused") {
		t.Errorf("%s\n%s", res.Status, body)
	}
}

func TestControlPlaneFailureAndForbidden(t *testing.T) {
	ts := newServer(t, func(_ *dashboard.Config, s *dashboard.Sources) {
		s.Checks = func(context.Context) []healthcheck.Result {
			return []healthcheck.Result{
				{Name: "issuer", Status: healthcheck.Fail, Detail: `secrets "plexus-identity-issuer" is forbidden: User "system:serviceaccount:plexus-viz:plexus-web" cannot get resource "secrets"`},
				{Name: "webhook", Status: healthcheck.Fail, Detail: "no caBundle", Hint: "restart the injector"},
			}
		}
	})
	_, body := get(t, ts, "", "/controlplane")
	for _, w := range []string{"Some checks failed.", `class="check warn"`, "not checked: the dashboard", `class="check fail"`, "hint: restart the injector"} {
		if !strings.Contains(body, w) {
			t.Errorf("control plane page lacks %q", w)
		}
	}
}

// sse reads Server-Sent Events: event name and data.
func sse(t *testing.T, r io.Reader, each func(event, data string) bool) {
	t.Helper()
	sc := bufio.NewScanner(r)
	event := ""
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			event = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			if !each(event, strings.TrimPrefix(line, "data: ")) {
				return
			}
		}
	}
}

func TestTapStream(t *testing.T) {
	got := make(chan tapapi.Request, 1)
	ts := newServer(t, func(c *dashboard.Config, s *dashboard.Sources) {
		c.MaxTapStreams = 1
		inner := s.Tap
		s.Tap = func(ctx context.Context, ns, resource, name string, req tapapi.Request, fn func(tapapi.Event) error) error {
			if ns != "plexus-demo" || resource != "deployments" || name != "web" {
				t.Errorf("tapped %s %s/%s", ns, resource, name)
			}
			got <- req
			return inner(ctx, ns, resource, name, req, fn)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ts.URL+"/api/tap?namespace=plexus-demo&resource=deployments&name=web&method=post&path=/books&direction=inbound&authority=books:8080&from=app%3Dload&to=app%3Dbooks", nil)
	res, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" || res.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("Content-Type %q, headers %v", ct, res.Header)
	}
	if r := <-got; r.Method != "POST" || r.PathPrefix != "/books" || r.Direction != "inbound" || r.Authority != "books:8080" ||
		r.FromNamespace != "plexus-demo" || r.FromSelector != "app=load" || r.ToNamespace != "plexus-demo" || r.ToSelector != "app=books" {
		t.Errorf("tap request %+v", r)
	}
	// A second tap while the first runs is over the limit of one.
	_, body := get(t, ts, "", "/api/tap?namespace=plexus-demo&resource=namespaces")
	if !strings.Contains(body, "event: end") || !strings.Contains(body, "too many live taps") {
		t.Errorf("second tap: %s", body)
	}
	var types []string
	sse(t, res.Body, func(event, data string) bool {
		if event == "tap" {
			i := strings.Index(data, `"type":"`)
			types = append(types, strings.SplitN(data[i+8:], `"`, 2)[0])
		}
		return len(types) < 3
	})
	if strings.Join(types, ",") != "requestStart,responseStart,responseEnd" {
		t.Errorf("events %v", types)
	}
}

func TestTapStreamEndsWithTheReason(t *testing.T) {
	ts := newServer(t, func(_ *dashboard.Config, s *dashboard.Sources) {
		s.Tap = func(context.Context, string, string, string, tapapi.Request, func(tapapi.Event) error) error {
			return io.ErrUnexpectedEOF
		}
	})
	_, body := get(t, ts, "", "/api/tap?namespace=plexus-demo")
	if !strings.Contains(body, "event: start") || !strings.Contains(body, "event: end") || !strings.Contains(body, "the tap failed: unexpected EOF") {
		t.Errorf("body %s", body)
	}
}

func TestConfigValidate(t *testing.T) {
	if err := dashboard.DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
	err := dashboard.Config{MaxTapStreams: 0, SparklineSpan: time.Hour, SparklineStep: time.Second}.Validate()
	for _, w := range []string{"control namespace", "window", "max tap streams", "more than 1000 points"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("err %v lacks %q", err, w)
		}
	}
}

func TestTapStreamOutlivesServerTimeouts(t *testing.T) {
	s, err := dashboard.New(dashboard.DefaultConfig(), webtest.Sources(50*time.Millisecond), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewUnstartedServer(s.Handler())
	ts.Config.ReadTimeout, ts.Config.WriteTimeout = 500*time.Millisecond, 500*time.Millisecond
	ts.Start()
	defer ts.Close()
	res, err := ts.Client().Get(ts.URL + "/api/tap?namespace=plexus-demo")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	start, n := time.Now(), 0
	sse(t, res.Body, func(event, _ string) bool {
		if event == "tap" {
			n++
		}
		return time.Since(start) < 2*time.Second
	})
	if time.Since(start) < 2*time.Second || n < 20 {
		t.Errorf("the stream ended after %s and %d events", time.Since(start), n)
	}
}
