package promstat

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/control/cli/routesview"
	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/control/meshstats"
	"github.com/plexus-mesh/plexus/control/routestats"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
	"github.com/plexus-mesh/plexus/testsupport/goldentest"
	"github.com/plexus-mesh/plexus/viz/cli"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

func f(v float64) *float64 { return &v }

// fakeProm answers from tables and records what it was asked.
type fakeProm struct {
	golden []vizquery.Golden
	routes []routestats.Row
	level  vizquery.Level
	filter vizquery.Filter
	window time.Duration
}

func (p *fakeProm) Golden(_ context.Context, level vizquery.Level, fl vizquery.Filter, window time.Duration) ([]vizquery.Golden, error) {
	p.level, p.filter, p.window = level, fl, window
	return p.golden, nil
}

func (p *fakeProm) Routes(_ context.Context, fl vizquery.Filter, window time.Duration) ([]routestats.Row, error) {
	p.filter, p.window = fl, window
	return p.routes, nil
}

func pod(ns, name, app string, meshed bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: app}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if meshed {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: meshpod.ProxyContainerName})
	}
	return p
}

func deployment(ns, name string) *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": name}}},
	}
}

// cluster: shop has web (two meshed pods) and books (one meshed, one
// not); other has api (one meshed pod).
func cluster() *fake.Clientset {
	return fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}},
		deployment("shop", "web"), deployment("shop", "books"), deployment("other", "api"),
		pod("shop", "web-1", "web", true), pod("shop", "web-2", "web", true),
		pod("shop", "books-1", "books", true), pod("shop", "books-2", "books", false),
		pod("other", "api-1", "api", true),
	)
}

func stats(rps, success, tls, p50, p95, p99 float64) meshstats.Stats {
	return meshstats.Stats{Requests: rps * 60, RPS: f(rps), SuccessRate: f(success), TLSShare: f(tls), LatencyP50: f(p50), LatencyP95: f(p95), LatencyP99: f(p99)}
}

func TestStatDeployments(t *testing.T) {
	prom := &fakeProm{golden: []vizquery.Golden{
		{Key: vizquery.Key{Namespace: "shop", WorkloadKind: "Deployment", WorkloadName: "web"}, Stats: stats(10, 0.995, 1, 2, 9, 20), Pods: 2, PodsUp: 2},
		{Key: vizquery.Key{Namespace: "shop", WorkloadKind: "Deployment", WorkloadName: "books"}, Stats: stats(4, 0.75, 0.5, 1, 3, 4.5), Pods: 1, PodsUp: 0},
		// Another kind of the same name is not the Deployment.
		{Key: vizquery.Key{Namespace: "shop", WorkloadKind: "StatefulSet", WorkloadName: "web"}, Stats: stats(99, 0, 0, 1, 1, 1), Pods: 1, PodsUp: 1},
	}}
	s := Stat{Kube: stat.Stat{Client: cluster()}, Prom: prom, Window: time.Minute}
	rows, err := s.Run(context.Background(), stat.Config{Resource: stat.Deployments, Namespace: "shop"})
	if err != nil {
		t.Fatal(err)
	}
	if prom.level != vizquery.ByWorkload || prom.filter != (vizquery.Filter{Namespace: "shop", WorkloadKind: "Deployment"}) || prom.window != time.Minute {
		t.Errorf("asked %s %+v over %s", prom.level, prom.filter, prom.window)
	}
	var out bytes.Buffer
	for _, format := range []string{stat.FormatTable, stat.FormatWide} {
		if err := stat.Render(&out, rows, format); err != nil {
			t.Fatal(err)
		}
	}
	goldentest.Golden(t, "deployments.txt", out.Bytes())
}

func TestStatAllNamespacesAndOne(t *testing.T) {
	prom := &fakeProm{golden: []vizquery.Golden{
		{Key: vizquery.Key{Namespace: "other", WorkloadKind: "Deployment", WorkloadName: "api", Pod: "api-1"}, Stats: stats(1, 1, 1, 1, 1, 1), Pods: 1, PodsUp: 1},
	}}
	s := Stat{Kube: stat.Stat{Client: cluster()}, Prom: prom, Window: 30 * time.Second}
	rows, err := s.Run(context.Background(), stat.Config{Resource: stat.Pods})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range rows {
		names = append(names, r.Namespace+"/"+r.Name)
	}
	if got := strings.Join(names, " "); got != "other/api-1 shop/books-1 shop/books-2 shop/web-1 shop/web-2" {
		t.Errorf("pods of every namespace: %s", got)
	}
	if prom.level != vizquery.ByPod || prom.filter != (vizquery.Filter{}) {
		t.Errorf("asked %s %+v", prom.level, prom.filter)
	}
	if rows[0].RPS == nil || *rows[0].RPS != 1 || rows[1].RPS != nil {
		t.Errorf("api-1 %v, books-1 %v: want api-1's figures alone", rows[0].RPS, rows[1].RPS)
	}

	rows, err = s.Run(context.Background(), stat.Config{Resource: stat.Deployments, Name: "api"})
	if err != nil || len(rows) != 1 || rows[0].Namespace != "other" {
		t.Errorf("deploy api in any namespace: %+v, %v", rows, err)
	}
	if _, err := s.Run(context.Background(), stat.Config{Resource: stat.Deployments, Name: "nope"}); err == nil || !strings.Contains(err.Error(), "not found in any namespace") {
		t.Errorf("a missing deployment: %v", err)
	}

	prom.golden = []vizquery.Golden{{Key: vizquery.Key{Namespace: "shop"}, Stats: stats(2, 1, 1, 1, 1, 1), Pods: 3, PodsUp: 3}}
	rows, err = s.Run(context.Background(), stat.Config{Resource: stat.Namespaces, Name: "shop"})
	if err != nil || len(rows) != 1 || rows[0].Name != "shop" || rows[0].Meshed != 3 || rows[0].Total != 4 || rows[0].RPS == nil || len(rows[0].Errors) != 0 {
		t.Errorf("namespace shop: %+v, %v", rows, err)
	}
	if prom.level != vizquery.ByNamespace || prom.filter != (vizquery.Filter{Namespace: "shop"}) {
		t.Errorf("asked %s %+v", prom.level, prom.filter)
	}
}

func TestRoutes(t *testing.T) {
	prom := &fakeProm{routes: []routestats.Row{
		{Key: routestats.Key{Protocol: "http", Parent: routestats.Ref{Namespace: "shop", Name: "books", Port: "8080"}, Route: routestats.Ref{Namespace: "shop", Kind: "HTTPRoute", Name: "canary"}},
			Requests: 120, SuccessRate: f(0.9), RPS: f(2), LatencyP50: f(3), LatencyP95: f(8), LatencyP99: f(12), ActualRPS: f(2.2), Retries: 12, Timeouts: 1},
		{Key: routestats.Key{Protocol: "http", Parent: routestats.Ref{Namespace: "shop", Name: "books", Port: "8080"}, Route: routestats.Ref{Name: "default"}}},
	}}
	rows, err := Routes(context.Background(), prom, RouteFilter(vizcli.Target{Kind: vizcli.Deployments, Name: "web"}, "shop"), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if prom.filter != (vizquery.Filter{Namespace: "shop", WorkloadKind: "Deployment", WorkloadName: "web"}) {
		t.Errorf("filter %+v", prom.filter)
	}
	var out bytes.Buffer
	if err := routesview.Render(&out, rows, stat.FormatWide); err != nil {
		t.Fatal(err)
	}
	goldentest.Golden(t, "routes.txt", out.Bytes())
	for target, want := range map[vizcli.Target]vizquery.Filter{
		{Kind: vizcli.Pods, Name: "web-1"}:       {Namespace: "shop", Pod: "web-1"},
		{Kind: vizcli.Namespaces, Name: "other"}: {Namespace: "other"},
		{Kind: vizcli.StatefulSets, Name: "db"}:  {Namespace: "shop", WorkloadKind: "StatefulSet", WorkloadName: "db"},
	} {
		if got := RouteFilter(target, "shop"); got != want {
			t.Errorf("%s: %+v, want %+v", target, got, want)
		}
	}
}
