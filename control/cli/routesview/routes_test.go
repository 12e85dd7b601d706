package routesview

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/control/routestats"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func pod(name string, meshed bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "web"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if meshed {
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = []corev1.Container{{Name: meshpod.ProxyContainerName, RestartPolicy: &always}}
	}
	return p
}

// fixture: deployment web in shop with meshed pods web-1 (a full window
// of traffic) and web-2 (restarted in the window), and unmeshed web-3;
// deployment db with no meshed pod.
func fixture(t *testing.T, fail map[string]bool) Routes {
	texts := map[string][2]string{
		"web-1": {"web-before.prom", "web-after.prom"},
		"web-2": {"web-before.prom", "restarted-after.prom"},
	}
	var mu sync.Mutex
	scrapes := map[string]int{}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	dep := func(name string) *appsv1.Deployment {
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
		}
	}
	client := fake.NewClientset(dep("web"), dep("db"), pod("web-1", true), pod("web-2", true), pod("web-3", false))
	return Routes{Stat: stat.Stat{
		Client: client,
		Now:    func() time.Time { return now },
		Sleep: func(_ context.Context, d time.Duration) error {
			now = now.Add(d)
			return nil
		},
		// Measure scrapes concurrently; each pod's scrapes are in order.
		Scrape: func(_ context.Context, ns, name string) ([]byte, error) {
			if fail[name] {
				return nil, errors.New("proxy unreachable")
			}
			files, ok := texts[name]
			if !ok || ns != "shop" {
				t.Errorf("scraped %s/%s, which is not a running meshed pod", ns, name)
				return nil, errors.New("not meshed")
			}
			mu.Lock()
			n := scrapes[name]
			scrapes[name]++
			mu.Unlock()
			return os.ReadFile(filepath.Join("testdata", files[n]))
		},
	}}
}

func cfg(res stat.Resource, name string) stat.Config {
	return stat.Config{Resource: res, Name: name, Namespace: "shop", Window: 10 * time.Second}
}

func row(t *testing.T, rows []routestats.Row, route string) routestats.Row {
	t.Helper()
	for _, r := range rows {
		if r.Route.Name == route {
			return r
		}
	}
	t.Fatalf("no row for route %s in %+v", route, rows)
	return routestats.Row{}
}

func near(t *testing.T, what string, got *float64, want float64) {
	t.Helper()
	if got == nil || math.Abs(*got-want) > 1e-9 {
		t.Errorf("%s = %v, want %v", what, deref(got), want)
	}
}

func deref(f *float64) any {
	if f == nil {
		return "none"
	}
	return *f
}

func TestPod(t *testing.T) {
	res, err := fixture(t, nil).Run(context.Background(), cfg(stat.Pods, "web-1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rows) != 3 || len(res.Errors) != 0 {
		t.Fatalf("rows %+v errors %v, want books, db and stock", res.Rows, res.Errors)
	}
	books := row(t, res.Rows, "books-api")
	if books.Protocol != routestats.HTTP || books.Requests != 1000 || books.Timeouts != 10 || books.Retries != 80 || books.RetrySuccesses != 60 || books.RetryLimitExceeded != 15 || books.RetryOverflow != 5 {
		t.Errorf("books: %+v", books)
	}
	near(t, "books success", books.SuccessRate, 0.94) // 404s succeed, 500s and timeouts fail
	near(t, "books rps", books.RPS, 100)
	near(t, "books actual rps", books.ActualRPS, 108) // two backends summed
	near(t, "books p50", books.LatencyP50, 5)
	near(t, "books p95", books.LatencyP95, 10+40*50.0/90)
	near(t, "books p99", books.LatencyP99, 50)
	stock := row(t, res.Rows, "stock-rpc")
	if stock.Protocol != routestats.GRPC || stock.Requests != 215 || stock.Timeouts != 5 || stock.Retries != 15 {
		t.Errorf("stock: %+v", stock)
	}
	near(t, "stock success", stock.SuccessRate, 200.0/215) // only grpc_status 0
	near(t, "stock actual rps", stock.ActualRPS, 23)
	db := row(t, res.Rows, "http")
	if db.Requests != 0 || db.RPS != nil || db.ActualRPS != nil || db.LatencyP50 != nil {
		t.Errorf("idle default route: %+v", db)
	}
}

func TestDeployment(t *testing.T) {
	// kubectl-style deploy/web: web-1's window plus web-2's restart delta.
	res, name, err := stat.ParseTarget([]string{"deploy/web"})
	if err != nil || res != stat.Deployments || name != "web" {
		t.Fatalf("ParseTarget: %v %q %v", res, name, err)
	}
	out, err := fixture(t, nil).Run(context.Background(), cfg(res, name))
	if err != nil {
		t.Fatal(err)
	}
	books := row(t, out.Rows, "books-api")
	if books.Requests != 1050 || books.Retries != 85 {
		t.Errorf("books over two pods: %+v", books)
	}
	near(t, "books success", books.SuccessRate, 980.0/1050)
	near(t, "books actual rps", books.ActualRPS, 113.5)
	for _, format := range []string{"table", "wide", "json"} {
		golden(t, "deploy-web."+format, out.Rows, format)
	}
}

func TestErrors(t *testing.T) {
	r := fixture(t, map[string]bool{"web-2": true})
	res, err := r.Run(context.Background(), cfg(stat.Deployments, "web"))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) != 1 || !strings.Contains(res.Errors[0], "web-2: proxy unreachable") || row(t, res.Rows, "books-api").Requests != 1000 {
		t.Errorf("one pod unreachable: errors %v, rows %+v", res.Errors, res.Rows)
	}
	r = fixture(t, map[string]bool{"web-1": true})
	if _, err := r.Run(context.Background(), cfg(stat.Pods, "web-1")); err == nil || !strings.Contains(err.Error(), "could be scraped") {
		t.Errorf("every pod unreachable: got %v", err)
	}
	for _, c := range []stat.Config{cfg(stat.Deployments, "db"), cfg(stat.Deployments, "nope"), cfg(stat.Deployments, "")} {
		if _, err := fixture(t, nil).Run(context.Background(), c); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if _, err := routestats.Parse([]byte("outbound_http_route_request_statuses_total{error=\"\" 1\n")); err == nil {
		t.Error("routestats.Parse accepted broken text")
	}
	if err := Render(&bytes.Buffer{}, nil, "xml"); err == nil {
		t.Error("output xml accepted")
	}
}

func golden(t *testing.T, name string, rows []routestats.Row, format string) {
	t.Helper()
	if format == "table" {
		format = stat.FormatTable
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
