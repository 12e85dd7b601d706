package mirror

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/mctest"
)

// api is one throwaway kube-apiserver.
type api struct {
	url  string
	core kubernetes.Interface
	dyn  dynamic.Interface
}

func startAPI(t testing.TB) api {
	t.Helper()
	s := apiservertest.Start(t)
	cfg := &rest.Config{Host: s.URL, BearerToken: apiservertest.AdminToken, QPS: -1,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}} // self-signed, loopback, test-only
	return api{url: s.URL, core: kubernetes.NewForConfigOrDie(cfg), dyn: dynamic.NewForConfigOrDie(cfg)}
}

// kubeconfig reaches a with token.
func (a api) kubeconfig(token string) []byte { return mctest.Kubeconfig(a.url, token) }

// pairEnv: cluster a (the Link CRD, namespaces plexus-multicluster and
// shop, the credentials of b) and cluster b (namespace shop), a running
// controller in a, and Link "b" to b. It returns both.
func pairEnv(t testing.TB, configure ...func(*Controller)) (a, b api) {
	t.Helper()
	a, b = startPair(t)
	linkPair(t, a, b, configure...)
	return a, b
}

// startPair starts a and b, each with namespaces plexus-multicluster and
// shop.
func startPair(t testing.TB) (a, b api) {
	t.Helper()
	a, b = startAPI(t), startAPI(t)
	for _, c := range []api{a, b} {
		for _, ns := range []string{mc.Namespace, "shop"} {
			if _, err := c.core.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return a, b
}

// linkPair installs the Link CRD and b's credentials in a, runs a
// controller there (configured by configure) and creates Link "b".
func linkPair(t testing.TB, a, b api, configure ...func(*Controller)) {
	t.Helper()
	ctx := context.Background()
	mctest.InstallLinkCRD(t, a.dyn)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: "cluster-credentials-b"},
		Type: mc.CredentialsSecretType, Data: map[string][]byte{mc.CredentialsKey: b.kubeconfig(apiservertest.AdminToken)}}
	if _, err := a.core.CoreV1().Secrets(mc.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	c, err := New(a.core, a.dyn, mc.Namespace, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range configure {
		f(c)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	createLink(t, a, "b", "b", "cluster-credentials-b")
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

func createLink(t testing.TB, a api, name, cluster, secret string) {
	t.Helper()
	u := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"clusterName": cluster, "credentialsSecret": secret}}}
	u.SetAPIVersion(mc.APIVersion)
	u.SetKind(mc.LinkKind)
	u.SetName(name)
	if _, err := a.dyn.Resource(mc.LinkResource).Namespace(mc.Namespace).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// export creates (or labels) Service shop/name in b, exported or not.
func export(t testing.TB, b api, name string, exported bool) {
	t.Helper()
	mode := ""
	if exported {
		mode = mc.ExportedRemoteDiscovery
	}
	exportAs(t, b, name, mode)
}

// exportAs creates (or labels) Service shop/name in c, exported in mode
// (mc.ExportedLabel's value; "": not exported).
func exportAs(t testing.TB, c api, name, mode string) {
	t.Helper()
	ctx := context.Background()
	b := c
	svcs := b.core.CoreV1().Services("shop")
	svc, err := svcs.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		svc, err = svcs.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": name}},
			Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	if mode != "" {
		svc.Labels[mc.ExportedLabel] = mode
	} else {
		delete(svc.Labels, mc.ExportedLabel)
	}
	if _, err := svcs.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// within fails the test unless cond holds within 5 s, and logs how long
// it took.
func within(t *testing.T, what string, cond func() bool) {
	t.Helper()
	start := time.Now()
	if !eventually.Holds(5*time.Second, cond) {
		t.Fatalf("%s: not within 5s", what)
	}
	t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

func mirrorOK(a api, name string) func() bool {
	return func() bool {
		svc, err := a.core.CoreV1().Services("shop").Get(context.Background(), name, metav1.GetOptions{})
		return err == nil && svc.Labels[mc.RemoteDiscoveryLabel] == "b" && svc.Labels[mc.LinkLabel] == "b" &&
			len(svc.Spec.Ports) == 1 && svc.Spec.Ports[0].Port == 80 && svc.Spec.Selector == nil
	}
}

func gone(a api, name string) func() bool {
	return func() bool {
		_, err := a.core.CoreV1().Services("shop").Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
}

// linkStatusOf is Link name's status in a.
func linkStatusOf(t *testing.T, a api, name string) (mc.LinkStatus, bool) {
	t.Helper()
	u, err := a.dyn.Resource(mc.LinkResource).Namespace(mc.Namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return mc.LinkStatus{}, false
	}
	l, err := mc.DecodeLink(u)
	if err != nil {
		t.Fatal(err)
	}
	return l.Status, true
}

// mirrorReason is the Mirrored condition's reason of remote shop/name in
// Link b's status ("" when it has no entry).
func mirrorReason(t *testing.T, a api, name string) string {
	st, _ := linkStatusOf(t, a, "b")
	for _, m := range st.MirrorServices {
		if m.RemoteRef == (mc.ObjectRef{Namespace: "shop", Name: name}) && len(m.Conditions) == 1 {
			return m.Conditions[0].Reason
		}
	}
	return ""
}

// TestLinkLifecycle (issue 27's T1, on two real API servers): exporting a
// Service in b creates its mirror in a, with b's ports and the labels
// destination reads, and the Link's status says so (Ready, one Mirrored
// entry); un-exporting deletes it; a local Service of a mirror's name is
// left alone and reported; deleting the Link deletes every mirror it made
// and the Link itself goes, within 5 s each.
func TestLinkLifecycle(t *testing.T) {
	var c *Controller
	a, b := pairEnv(t, func(ctl *Controller) { c = ctl })
	ctx := context.Background()

	export(t, b, "hello", true)
	within(t, "export: mirror hello-b created", mirrorOK(a, "hello-b"))
	within(t, "Link status: Ready and hello Mirrored", func() bool {
		st, _ := linkStatusOf(t, a, "b")
		for _, c := range st.Conditions {
			if c.Type == mc.ConditionReady && c.Status != metav1.ConditionTrue {
				return false
			}
		}
		return len(st.Conditions) == 4 && mirrorReason(t, a, "hello") == reasonMirrored
	})

	within(t, "metrics: ready, one mirror", func() bool {
		return testutil.ToFloat64(c.metrics.ready.WithLabelValues("b", "b")) == 1 && testutil.ToFloat64(c.metrics.mirrors.WithLabelValues("b", "mirrored")) == 1
	})

	export(t, b, "hello", false)
	within(t, "un-export: mirror hello-b deleted", gone(a, "hello-b"))
	within(t, "un-export: hello's status entry gone", func() bool { return mirrorReason(t, a, "hello") == "" })

	local, err := a.core.CoreV1().Services("shop").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-b"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8080}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	export(t, b, "web", true)
	within(t, "collision reported", func() bool { return mirrorReason(t, a, "web") == reasonNameCollision })
	within(t, "metrics: the collision counted", func() bool { return testutil.ToFloat64(c.metrics.mirrors.WithLabelValues("b", "failed")) == 1 })
	if cur, err := a.core.CoreV1().Services("shop").Get(ctx, "web-b", metav1.GetOptions{}); err != nil || cur.ResourceVersion != local.ResourceVersion {
		t.Errorf("the local web-b was touched: %v %v", cur, err)
	}

	for _, name := range []string{"hello", "api", "db"} {
		export(t, b, name, true)
	}
	for _, name := range []string{"hello-b", "api-b", "db-b"} {
		within(t, "export: mirror "+name+" created", mirrorOK(a, name))
	}
	if err := a.dyn.Resource(mc.LinkResource).Namespace(mc.Namespace).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	within(t, "Link deleted: every mirror gone", func() bool {
		return gone(a, "hello-b")() && gone(a, "api-b")() && gone(a, "db-b")()
	})
	within(t, "Link deleted: the Link gone", func() bool { _, ok := linkStatusOf(t, a, "b"); return !ok })
	within(t, "Link deleted: its series gone", func() bool { return testutil.CollectAndCount(c.metrics.ready) == 0 })
	if _, err := a.core.CoreV1().Services("shop").Get(ctx, "web-b", metav1.GetOptions{}); err != nil {
		t.Errorf("the local web-b went with the Link: %v", err)
	}
}

// TestLinkBadCredentials: a Link whose Secret is missing, or whose
// credentials cannot list the remote Services, says so in its status and
// mirrors nothing.
func TestLinkBadCredentials(t *testing.T) {
	a, b := pairEnv(t)
	ctx := context.Background()
	export(t, b, "hello", true)
	within(t, "mirror hello-b created", mirrorOK(a, "hello-b"))

	condition := func(link, typ string) metav1.Condition {
		st, _ := linkStatusOf(t, a, link)
		for _, c := range st.Conditions {
			if c.Type == typ {
				return c
			}
		}
		return metav1.Condition{}
	}
	createLink(t, a, "missing", "c", "no-such-secret")
	within(t, "missing Secret reported", func() bool {
		c := condition("missing", mc.ConditionCredentialsValid)
		return c.Status == metav1.ConditionFalse && c.Reason == "Missing"
	})

	nobody := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: "nobody"},
		Type: mc.CredentialsSecretType, Data: map[string][]byte{mc.CredentialsKey: b.kubeconfig(apiservertest.NobodyToken)}}
	if _, err := a.core.CoreV1().Secrets(mc.Namespace).Create(ctx, nobody, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createLink(t, a, "forbidden", "d", "nobody")
	within(t, "credentials without rights reported, naming them", func() bool {
		c := condition("forbidden", mc.ConditionCredentialsValid)
		return c.Status == metav1.ConditionFalse && c.Reason == "Forbidden" && strings.Contains(c.Message, "list services") && strings.Contains(c.Message, "watch pods")
	})
	t.Logf("credentials without rights: %s", condition("forbidden", mc.ConditionCredentialsValid).Message)
	if _, err := a.core.CoreV1().Services("shop").Get(ctx, "hello-d", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("a Link without rights mirrored hello: %v", err)
	}
}

// TestMirrorRepaired: a mirror deleted or edited by hand is put back as
// its remote Service says, and un-exporting a Service whose mirror name
// is taken by a local Service leaves that Service alone.
func TestMirrorRepaired(t *testing.T) {
	a, b := pairEnv(t)
	ctx := context.Background()
	export(t, b, "hello", true)
	within(t, "mirror hello-b created", mirrorOK(a, "hello-b"))

	if err := a.core.CoreV1().Services("shop").Delete(ctx, "hello-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	within(t, "deleted mirror recreated", mirrorOK(a, "hello-b"))

	cur, err := a.core.CoreV1().Services("shop").Get(ctx, "hello-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Spec.Ports[0].Port = 9999
	if _, err := a.core.CoreV1().Services("shop").Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	within(t, "edited mirror restored", mirrorOK(a, "hello-b"))

	if _, err := a.core.CoreV1().Services("shop").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web-b"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 8080}}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	export(t, b, "web", true)
	within(t, "collision reported", func() bool { return mirrorReason(t, a, "web") == reasonNameCollision })
	export(t, b, "web", false)
	within(t, "un-export: web's status entry gone", func() bool { return mirrorReason(t, a, "web") == "" })
	if _, err := a.core.CoreV1().Services("shop").Get(ctx, "web-b", metav1.GetOptions{}); err != nil {
		t.Errorf("un-exporting web deleted the local web-b: %v", err)
	}
}
