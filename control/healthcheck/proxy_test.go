package healthcheck

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/control/inject"
	"github.com/plexus-mesh/plexus/daemonset/repair"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

func runningPod(ns, name, version string, meshed bool, labels map[string]string) *corev1.Pod {
	if labels == nil {
		labels = map[string]string{}
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name), Labels: labels},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	if meshed {
		p.Labels[inject.LabelProxyVersion] = version
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: meshpod.ProxyContainerName,
			Env:            []corev1.EnvVar{{Name: envRedirectProbe, Value: "4192"}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromInt32(4192)}}}})
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: meshpod.ProxyContainerName, Ready: true}}
	}
	return p
}

// TestRedirectsCheckOrSayTheyCouldNot: with no node agent reporting (as in
// node-image mode), a pod whose proxy's redirect probe passes is proven;
// one whose probe does not pass, or that has none, is named as not
// checked, never passed.
func TestRedirectsCheckOrSayTheyCouldNot(t *testing.T) {
	proven := runningPod("shop", "proven", "v2", true, nil)
	failing := runningPod("shop", "failing", "v2", true, nil)
	failing.Status.ContainerStatuses[0].Ready = false
	noProbe := runningPod("shop", "old", "v1", true, nil)
	noProbe.Spec.Containers[1].ReadinessProbe.HTTPGet.Port = intstr.FromString("plexus-admin")
	c := Checker{Client: fake.NewClientset(proven, failing, noProbe)}
	r := c.redirects(context.Background(), "shop", []corev1.Pod{*proven, *failing, *noProbe})
	if r.Status != Warn || !strings.Contains(r.Detail, "1 of 3 proven") || !strings.Contains(r.Detail, "shop/failing (its redirect probe is not passing yet)") ||
		!strings.Contains(r.Detail, "shop/old (no redirect probe") {
		t.Errorf("%v %q", r.Status, r.Detail)
	}
	if r := c.redirects(context.Background(), "shop", []corev1.Pod{*proven}); r.Status != OK || !strings.Contains(r.Detail, "1 of 1 proven") {
		t.Errorf("proven only: %v %q", r.Status, r.Detail)
	}
}

func redirectEvent(p *corev1.Pod, reason string, at time.Time) *corev1.Event {
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: p.Namespace, Name: p.Name + "." + reason},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
		Reason:         reason, Type: corev1.EventTypeWarning, LastTimestamp: metav1.NewTime(at),
	}
}

// TestProxyChecks: each data-plane check finds what it is for, and passes
// a healthy namespace.
func TestProxyChecks(t *testing.T) {
	injector := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: InjectorName},
		Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "injector", Args: []string{"injector", "--proxy-version=v2"}},
		}}}},
	}
	shop := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop", Labels: map[string]string{inject.AnnotationInject: "enabled"}}}
	good := runningPod("shop", "good", "v2", true, nil)
	old := runningPod("shop", "old", "v1", true, nil)
	bypass := runningPod("shop", "bypass", "v2", true, nil)
	pending := runningPod("shop", "pending", "", false, nil)
	optedOut := runningPod("shop", "opted-out", "", false, map[string]string{inject.AnnotationInject: "disabled"})
	expiry := map[string]time.Time{"good": now.Add(20 * time.Hour), "old": now.Add(-time.Hour), "bypass": now.Add(2 * time.Hour)}
	scrape := func(_ context.Context, ns, pod string) ([]byte, error) {
		if pod == "old" {
			return []byte("request_total 1\n" + certMetric + " " + fmt.Sprint(expiry[pod].Unix()) + "\n"), nil
		}
		return []byte(fmt.Sprintf("# TYPE %s gauge\n%s %d\n", certMetric, certMetric, expiry[pod].Unix())), nil
	}
	client := fake.NewClientset(injector, shop, good, old, bypass, pending, optedOut,
		redirectEvent(bypass, "RedirectMissing", now.Add(-2*time.Hour)), // never repaired: still bypassing
		redirectEvent(good, "RedirectRepairFailed", now.Add(-10*time.Minute)),
		redirectEvent(good, "RedirectRepaired", now.Add(-5*time.Minute)), // repaired since
	)
	c := Checker{Client: client, Now: func() time.Time { return now }, Scrape: scrape}
	rs := c.proxyChecks(context.Background(), "shop")
	want := []struct {
		status   Status
		contains string
	}{
		{Warn, "1 of 3 proxies are not v2: shop/old (v1)"},
		{Fail, "1 proxies without a valid certificate: shop/old (expired 1h0m0s ago)"},
		{Fail, "1 pods: shop/bypass (RedirectMissing)"},
		{Warn, "1 pods without a proxy although injection is enabled: shop/pending"},
	}
	if len(rs) != len(want) {
		t.Fatalf("%d results, want %d: %+v", len(rs), len(want), rs)
	}
	for i, w := range want {
		if rs[i].Status != w.status || !strings.Contains(rs[i].Detail, w.contains) {
			t.Errorf("%s: %v %q, want %v and %q", rs[i].Name, rs[i].Status, rs[i].Detail, w.status, w.contains)
		}
	}
	if strings.Contains(rs[1].Detail, "bypass") {
		t.Errorf("2 h left is not late: %q", rs[1].Detail)
	}

	// Healthy: one current proxy, its certificate fresh, no Events; a pod
	// opted in by annotation only, which the webhook never selects, is
	// not waiting for a proxy.
	other := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other", Annotations: map[string]string{inject.AnnotationInject: "enabled"}}}
	annotated := runningPod("other", "annotated", "", false, nil)
	healthyClient := fake.NewClientset(injector, shop, good, optedOut, other, annotated)
	c = Checker{Client: healthyClient, Now: func() time.Time { return now }, Scrape: scrape}
	for _, r := range c.proxyChecks(context.Background(), "") {
		if r.Status != OK {
			t.Errorf("healthy: %s: %v %q", r.Name, r.Status, r.Detail)
		}
	}
}

// TestProxyCertificateStarting: no certificate yet warns on a pod that is
// not ready, fails on one that is.
func TestProxyCertificateStarting(t *testing.T) {
	starting := runningPod("shop", "starting", "v2", true, nil)
	ready := runningPod("shop", "ready", "v2", true, nil)
	ready.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
	c := Checker{Now: func() time.Time { return now }, Scrape: func(context.Context, string, string) ([]byte, error) {
		return []byte(certMetric + " 0\n"), nil
	}}
	if r := c.proxyCertificates(context.Background(), []corev1.Pod{*starting}); r.Status != Warn || !strings.Contains(r.Detail, "starting") {
		t.Errorf("starting: %v %q", r.Status, r.Detail)
	}
	if r := c.proxyCertificates(context.Background(), []corev1.Pod{*ready}); r.Status != Fail || !strings.Contains(r.Detail, "shop/ready (no certificate)") {
		t.Errorf("ready: %v %q", r.Status, r.Detail)
	}
}

// TestProxyCertificateLate: less than CertWarnLeft left warns.
func TestProxyCertificateLate(t *testing.T) {
	p := runningPod("shop", "late", "v2", true, nil)
	c := Checker{Now: func() time.Time { return now }, Scrape: func(context.Context, string, string) ([]byte, error) {
		return []byte(fmt.Sprintf("%s %d\n", certMetric, now.Add(time.Hour).Unix())), nil
	}}
	r := c.proxyCertificates(context.Background(), []corev1.Pod{*p})
	if r.Status != Warn || !strings.Contains(r.Detail, "renew late: shop/late (1h0m0s left)") {
		t.Errorf("%v %q", r.Status, r.Detail)
	}
}

// TestRedirectReasonsAreTheAgents: the reasons read are those the node
// agent writes.
func TestRedirectReasonsAreTheAgents(t *testing.T) {
	if reasonRepaired != repair.ReasonRepaired || reasonMissing != repair.ReasonMissing || reasonRepairFailed != repair.ReasonRepairFailed {
		t.Error("check's redirect Event reasons differ from daemonset/repair's")
	}
}
