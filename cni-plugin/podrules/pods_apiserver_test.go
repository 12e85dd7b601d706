package podrules

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
)

// apiPods starts a real kube-apiserver holding the pod app/web (meshed,
// one annotation) and returns it with the pod as created.
func apiPods(tb testing.TB) (*apiservertest.Server, *corev1.Pod) {
	tb.Helper()
	api := apiservertest.Start(tb)
	api.BindShippedRole(tb)
	api.Namespace(tb, "app")
	always := corev1.ContainerRestartPolicyAlways
	created, err := api.Client(tb, apiservertest.AdminToken).CoreV1().Pods("app").Create(context.Background(), &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Annotations: map[string]string{"config.plexus.dev/skip-outbound-ports": "25"}},
		Spec: corev1.PodSpec{
			InitContainers: []corev1.Container{{Name: ProxyContainerName, Image: "registry.invalid/proxy", RestartPolicy: &always}},
			Containers:     []corev1.Container{{Name: "app", Image: "registry.invalid/app"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	return api, created
}

// TestPodGetterAgainstAPIServer reads a pod from a real kube-apiserver with
// the node agent's kubeconfig and RBAC, and checks how its errors classify.
func TestPodGetterAgainstAPIServer(t *testing.T) {
	api, created := apiPods(t)
	retry := Retry{Attempts: 2, PerAttempt: 2 * time.Second, Backoff: time.Millisecond}
	ctx := context.Background()

	g, err := NewKubeconfigPodGetter(api.PluginKubeconfig(t, apiservertest.AgentToken), retry.PerAttempt)
	if err != nil {
		t.Fatal(err)
	}
	pod, err := GetPod(ctx, g, retry, "app", "web")
	if err != nil {
		t.Fatal(err)
	}
	if pod.UID != string(created.UID) || pod.Annotations["config.plexus.dev/skip-outbound-ports"] != "25" || !isMeshed(pod) {
		t.Fatalf("read pod uid=%s annotations=%v meshed=%v, want uid %s, the annotation, meshed", pod.UID, pod.Annotations, isMeshed(pod), created.UID)
	}

	_, err = GetPod(ctx, g, retry, "app", "gone")
	if err == nil || Transient(err) || !strings.Contains(err.Error(), `pods "gone" not found`) || !strings.Contains(err.Error(), "attempt 1 of 2") {
		t.Fatalf("missing pod: %v (Transient %v)", err, Transient(err))
	}

	nobody, err := NewKubeconfigPodGetter(api.PluginKubeconfig(t, apiservertest.NobodyToken), retry.PerAttempt)
	if err != nil {
		t.Fatal(err)
	}
	_, err = GetPod(ctx, nobody, retry, "app", "web")
	if err == nil || Transient(err) || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("user without RBAC: %v (Transient %v)", err, Transient(err))
	}

	bad, err := NewKubeconfigPodGetter(api.PluginKubeconfig(t, "no-such-token"), retry.PerAttempt)
	if err != nil {
		t.Fatal(err)
	}
	_, err = GetPod(ctx, bad, retry, "app", "web")
	if err == nil || Transient(err) || !strings.Contains(err.Error(), "Unauthorized") {
		t.Fatalf("unknown token: %v (Transient %v)", err, Transient(err))
	}
}

// BenchmarkPodGet times what one plugin process does to read its pod:
// load the kubeconfig, connect (TLS handshake), GET and decode, against a
// real kube-apiserver on loopback.
func BenchmarkPodGet(b *testing.B) {
	api, _ := apiPods(b)
	kubeconfig := api.PluginKubeconfig(b, apiservertest.AgentToken)
	retry := DefaultRetry()
	for b.Loop() {
		g, err := NewKubeconfigPodGetter(kubeconfig, retry.PerAttempt)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := GetPod(context.Background(), g, retry, "app", "web"); err != nil {
			b.Fatal(err)
		}
	}
}
