package stat

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func pod(name, app string, meshed bool, phase corev1.PodPhase) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: app}}},
		Status:     corev1.PodStatus{Phase: phase},
	}
	if meshed {
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = []corev1.Container{{Name: meshpod.ProxyContainerName, RestartPolicy: &always}}
	}
	return p
}

func deployment(name string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
	}
}

// fixture is a namespace shop with deployment web (two meshed pods, one
// not), deployment db (one unmeshed pod, one finished) and namespace
// empty.
type fixture struct {
	stat    Stat
	mu      sync.Mutex
	scrapes map[string]int
	fail    map[string]bool
}

func newFixture(t *testing.T) *fixture {
	objs := []runtime.Object{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "empty"}},
		deployment("web"), deployment("db"),
		pod("web-1", "web", true, corev1.PodRunning),
		pod("web-2", "web", true, corev1.PodRunning),
		pod("web-3", "web", false, corev1.PodRunning),
		pod("db-1", "db", false, corev1.PodRunning),
		pod("db-0-old", "db", true, corev1.PodSucceeded),
	}
	// Recorded proxy scrapes: web-1 served 1000 responses in the window,
	// web-2 restarted and served 50 since.
	texts := map[string][2]string{
		"web-1": {"web-before.prom", "web-after.prom"},
		"web-2": {"web-before.prom", "restarted-after.prom"},
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := &fixture{scrapes: map[string]int{}, fail: map[string]bool{}}
	f.stat = Stat{
		Client: fake.NewClientset(objs...),
		Now:    func() time.Time { return now },
		Sleep: func(_ context.Context, d time.Duration) error {
			now = now.Add(d)
			return nil
		},
		Scrape: func(_ context.Context, ns, name string) ([]byte, error) {
			f.mu.Lock()
			n := f.scrapes[name]
			f.scrapes[name]++
			f.mu.Unlock()
			if f.fail[name] {
				return nil, errors.New("proxy unreachable")
			}
			files, ok := texts[name]
			if !ok || ns != "shop" {
				t.Errorf("scraped %s/%s, which is not a running meshed pod", ns, name)
				return nil, errors.New("not meshed")
			}
			return os.ReadFile(filepath.Join("..", "..", "meshstats", "testdata", files[n]))
		},
	}
	return f
}

func run(t *testing.T, f *fixture, cfg Config) []Row {
	t.Helper()
	rows, err := f.stat.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

func TestDeployments(t *testing.T) {
	f := newFixture(t)
	rows := run(t, f, Config{Resource: Deployments, Namespace: "shop", Window: 10 * time.Second})
	if len(rows) != 2 || rows[0].Name != "db" || rows[1].Name != "web" {
		t.Fatalf("rows = %+v, want db and web", rows)
	}
	db, web := rows[0], rows[1]
	if db.Meshed != 0 || db.Total != 1 || db.RPS != nil {
		t.Errorf("db: %+v, want 0/1 meshed and no traffic", db)
	}
	if web.Meshed != 2 || web.Total != 3 {
		t.Errorf("web: meshed %d/%d, want 2/3", web.Meshed, web.Total)
	}
	// The two pods' deltas add up (see meshstats TestAggregate).
	if web.Requests != 1050 || web.RPS == nil || *web.RPS != 105 || *web.TLSShare != 950.0/1050 || *web.LatencyP99 != 99.375 {
		t.Errorf("web: %+v", web.Stats)
	}
	if f.scrapes["web-1"] != 2 || f.scrapes["web-2"] != 2 {
		t.Errorf("scrapes = %v, want two per meshed pod", f.scrapes)
	}
	for _, format := range []string{"table", "wide", "json", "yaml"} {
		golden(t, "deployments."+format, rows, format)
	}
}

func TestNamespacesAndPods(t *testing.T) {
	f := newFixture(t)
	rows := run(t, f, Config{Resource: Namespaces, Window: 10 * time.Second})
	if len(rows) != 2 || rows[0].Name != "empty" || rows[1].Name != "shop" || rows[1].Meshed != 2 || rows[1].Total != 4 || rows[1].Requests != 1050 {
		t.Errorf("namespace rows: %+v", rows)
	}
	golden(t, "namespaces.table", rows, "table")

	f = newFixture(t)
	rows = run(t, f, Config{Resource: Pods, Name: "web-1", Namespace: "shop", Window: 10 * time.Second})
	if len(rows) != 1 || rows[0].Requests != 1000 || *rows[0].SuccessRate != 0.99 || f.scrapes["web-2"] != 0 {
		t.Errorf("pod web-1: %+v (scrapes %v)", rows, f.scrapes)
	}
}

func TestScrapeErrorIsReported(t *testing.T) {
	f := newFixture(t)
	f.fail["web-2"] = true
	rows := run(t, f, Config{Resource: Deployments, Name: "web", Namespace: "shop", Window: 10 * time.Second})
	if len(rows) != 1 || len(rows[0].Errors) != 1 || !strings.Contains(rows[0].Errors[0], "web-2: proxy unreachable") {
		t.Fatalf("rows = %+v, want web with an error naming web-2", rows)
	}
	if rows[0].Requests != 1000 {
		t.Errorf("requests = %v, want web-1's 1000 only", rows[0].Requests)
	}
}

func TestNotFoundAndInvalid(t *testing.T) {
	f := newFixture(t)
	for _, cfg := range []Config{
		{Resource: Deployments, Name: "nope", Namespace: "shop", Window: time.Second},
		{Resource: Pods, Name: "nope", Namespace: "shop", Window: time.Second},
		{Resource: Namespaces, Name: "nope", Window: time.Second},
	} {
		if _, err := f.stat.Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), "nope") {
			t.Errorf("%+v: got %v, want an error naming nope", cfg, err)
		}
	}
	if err := (Config{Resource: Pods, Namespace: "shop", Window: 0}).Validate(); err == nil {
		t.Error("zero window accepted")
	}
	if _, _, err := ParseTarget([]string{"svc/web"}); err == nil {
		t.Error("resource svc accepted")
	}
	if err := Render(&bytes.Buffer{}, nil, "xml"); err == nil {
		t.Error("output xml accepted")
	}
}

func TestParseTarget(t *testing.T) {
	for _, args := range [][]string{{"po/web-1"}, {"pod", "web-1"}, {"pods/web-1"}} {
		if res, name, err := ParseTarget(args); err != nil || res != Pods || name != "web-1" {
			t.Errorf("%q: %v %q %v", args, res, name, err)
		}
	}
	for _, args := range [][]string{nil, {"deploy"}, {"deploy/"}, {"svc/web"}, {"deploy/web", "x"}, {"deploy/a/b"}, {"deploy", "web", "x"}} {
		if _, _, err := ParseTarget(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

func golden(t *testing.T, name string, rows []Row, format string) {
	t.Helper()
	if format == "table" {
		format = FormatTable
	}
	var out bytes.Buffer
	if err := Render(&out, rows, format); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("%s differs (go test -update rewrites it); got:\n%s", path, out.String())
	}
}

// TestParseKindAndNameForms: kubectl's ways to name one object, or a kind.
func TestParseKindAndNameForms(t *testing.T) {
	for _, args := range [][]string{{"deploy/web"}, {"deploy", "web"}, {"deployment/web"}, {"deployments", "web"}} {
		res, name, err := ParseKindAndName(args)
		if err != nil || res != Deployments || name != "web" {
			t.Errorf("%q: %v %q %v; want deployments web", args, res, name, err)
		}
	}
	if res, name, err := ParseKindAndName([]string{"po"}); err != nil || res != Pods || name != "" {
		t.Errorf("po: %v %q %v", res, name, err)
	}
	for _, args := range [][]string{nil, {"svc/web"}, {"deploy/"}, {"deploy/web", "x"}, {"a", "b", "c"}} {
		if _, _, err := ParseKindAndName(args); err == nil {
			t.Errorf("%q accepted", args)
		}
	}
}

// TestOutboundByCluster: with Outbound, a deployment's rows are the
// requests it sent, one per cluster their endpoints were in (the proxies'
// dst_cluster): this one's ("local") and b's, in that order; inbound
// series are left out.
func TestOutboundByCluster(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	scrapes := 0
	s := Stat{
		Client: fake.NewClientset(deployment("client"), pod("client-1", "client", true, corev1.PodRunning)),
		Now:    func() time.Time { return now },
		Sleep: func(_ context.Context, d time.Duration) error {
			now = now.Add(d)
			return nil
		},
		Scrape: func(context.Context, string, string) ([]byte, error) {
			scrapes++
			return os.ReadFile(filepath.Join("..", "..", "meshstats", "testdata", []string{"client-before.prom", "client-after.prom"}[scrapes-1]))
		},
	}
	rows, err := s.Run(context.Background(), Config{Resource: Deployments, Namespace: "shop", Window: 10 * time.Second, Outbound: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].ToCluster != "" || rows[1].ToCluster != "b" {
		t.Fatalf("rows %+v, want this cluster's and b's", rows)
	}
	local, b := rows[0], rows[1]
	if local.Requests != 200 || *local.RPS != 20 || *local.SuccessRate != 1 {
		t.Errorf("local: %+v, want 200 requests, 20 rps, all successful", local.Stats)
	}
	if b.Requests != 110 || *b.RPS != 11 || *b.SuccessRate != 100.0/110 || *b.TLSShare != 1 {
		t.Errorf("b: %+v, want 110 requests, 11 rps, 100 successful, all over mTLS", b.Stats)
	}
	var out bytes.Buffer
	if err := RenderOutbound(&out, rows, FormatTable); err != nil {
		t.Fatal(err)
	}
	want := `NAME     CLUSTER   MESHED   SUCCESS   RPS       LATENCY_P50   LATENCY_P95   LATENCY_P99   TLS
client   local     1/1      100.00%   20.0rps   1ms           5ms           5ms           100%
client   b         1/1      90.91%    11.0rps   3ms           5ms           5ms           100%
`
	if out.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", out.String(), want)
	}
}
