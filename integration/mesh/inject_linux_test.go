package mesh

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestInjector deploys the whole control plane from deploy/ and proves the
// injector's contract on the real API server: in a namespace that enforces
// Pod Security "restricted" and opts into the mesh, injected pods are
// admitted with no init container and no added capability, their traffic
// is redirected by the CNI plugin and carried over mTLS; the same in an
// ordinary namespace; a malformed setting is refused naming it; and with
// the injector down, opted-in namespaces get an admission error while
// others are unaffected.
func TestInjector(t *testing.T) {
	env := clustercni.Read(t)
	c := clustertest.Connect(t)
	env.Install(t)
	deployControlPlane(t, c)
	c.WaitDeploymentReady(t, controlNamespace, "plexus-injector", 2*time.Minute)

	for _, tc := range []struct {
		name   string
		labels map[string]string
	}{
		{"restricted", map[string]string{"pod-security.kubernetes.io/enforce": "restricted", "plexus.dev/inject": "enabled"}},
		{"baseline", meshLabels},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ns := c.Namespace(t, "inject-"+tc.name, tc.labels)
			deploy(t, c, ns, "hello", 1, meshed, restricted(podSpec("hello", "serve", ":8080")))
			service(t, c, ns, "hello", 8080)
			deploy(t, c, ns, "client", 1, meshed, restricted(podSpec("client", "poll", "-interval=100ms", "http://hello."+ns+".svc.cluster.local/")))
			c.WaitDeploymentReady(t, ns, "hello", 3*time.Minute)
			c.WaitDeploymentReady(t, ns, "client", 3*time.Minute)
			server, client := pods(t, c, ns, "hello")[0], pods(t, c, ns, "client")[0]
			for _, p := range []corev1.Pod{server, client} {
				checkInjected(t, &p)
			}
			waitAnswers(t, c, ns, client.Name, 5)
			in := proxyMetrics(t, c, ns, server.Name)
			wantSeries(t, in, "request_total", `direction="inbound"`, `tls="true"`, `client_id="spiffe://`+trustDomain+`/ns/`+ns+`/sa/client"`)
			out := proxyMetrics(t, c, ns, client.Name)
			wantSeries(t, out, "request_total", `direction="outbound"`, `tls="true"`, `server_id="spiffe://`+trustDomain+`/ns/`+ns+`/sa/hello"`)
		})
	}

	t.Run("malformed setting is refused naming it", func(t *testing.T) {
		ns := c.Namespace(t, "inject-bad", meshLabels)
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "bad", Annotations: map[string]string{"config.plexus.dev/skip-outbound-ports": "25,smtp"}},
			Spec:       podSpec("default", "serve", ":8080"),
		}
		_, err := c.Client.CoreV1().Pods(ns).Create(clustertest.Context(t, time.Minute), pod, metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), `config.plexus.dev/skip-outbound-ports="25,smtp"`) {
			t.Fatalf("creating a pod with a malformed setting: %v; want a refusal naming the annotation and value", err)
		}
	})

	t.Run("an app as the proxy's UID or GID is refused naming it", func(t *testing.T) {
		ns := c.Namespace(t, "inject-ids", meshLabels)
		ctx := clustertest.Context(t, time.Minute)
		for _, tc := range []struct {
			name, want string
			sc         *corev1.SecurityContext
		}{
			{"uid", `container "app" runs as UID 2102`, &corev1.SecurityContext{RunAsUser: ptr(int64(2102))}},
			{"gid", `container "app" runs as GID 2102`, &corev1.SecurityContext{RunAsUser: ptr(int64(1000)), RunAsGroup: ptr(int64(2102))}},
		} {
			spec := podSpec("default", "serve", ":8080")
			spec.Containers[0].SecurityContext = tc.sc
			_, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "as-proxy-" + tc.name}, Spec: spec}, metav1.CreateOptions{})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("a pod whose app runs as the proxy's %s: %v; want a refusal naming %s", tc.name, err, tc.want)
			}
		}
		// A debug container added to a meshed pod, as the proxy's UID.
		pod, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "meshed"}, Spec: podSpec("default", "serve", ":8080")}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		pod.Spec.EphemeralContainers = append(pod.Spec.EphemeralContainers, corev1.EphemeralContainer{EphemeralContainerCommon: corev1.EphemeralContainerCommon{
			Name: "debugger", Image: testappImage, ImagePullPolicy: corev1.PullNever, SecurityContext: &corev1.SecurityContext{RunAsUser: ptr(int64(2102))}}})
		_, err = c.Client.CoreV1().Pods(ns).UpdateEphemeralContainers(ctx, pod.Name, pod, metav1.UpdateOptions{})
		if err == nil || !strings.Contains(err.Error(), `ephemeral container "debugger" runs as UID 2102`) {
			t.Errorf("a debug container as the proxy's UID in a meshed pod: %v; want a refusal naming it", err)
		}
	})

	t.Run("injector down: opted-in namespaces refused, others unaffected", func(t *testing.T) {
		optedIn := c.Namespace(t, "inject-down", meshLabels)
		other := c.Namespace(t, "not-meshed", nil)
		scale(t, c, controlNamespace, "plexus-injector", 0)
		defer scale(t, c, controlNamespace, "plexus-injector", 1)
		pod := func() *corev1.Pod {
			return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: podSpec("default", "serve", ":8080")}
		}
		ctx := clustertest.Context(t, time.Minute)
		_, err := c.Client.CoreV1().Pods(optedIn).Create(ctx, pod(), metav1.CreateOptions{})
		if err == nil || !strings.Contains(err.Error(), "inject.plexus.dev") {
			t.Errorf("pod in an opted-in namespace with the injector down: %v; want an admission error from the webhook", err)
		}
		if _, err := c.Client.CoreV1().Pods(other).Create(ctx, pod(), metav1.CreateOptions{}); err != nil {
			t.Errorf("pod outside the mesh with the injector down: %v", err)
		}
		clustertest.WaitFor(t, time.Minute, "the un-meshed pod to run", func(ctx context.Context) (bool, error) {
			p, err := c.Client.CoreV1().Pods(other).Get(ctx, "p", metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning && len(p.Spec.InitContainers) == 0, err
		})
	})
}

// restricted makes a pod spec meet Pod Security "restricted" on its own
// (the injected proxy must meet it too, or the API server refuses the pod).
func restricted(spec corev1.PodSpec) corev1.PodSpec {
	spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   ptr(true),
		RunAsUser:      ptr(int64(65532)),
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	for i := range spec.Containers {
		spec.Containers[i].SecurityContext = &corev1.SecurityContext{
			AllowPrivilegeEscalation: ptr(false),
			Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
		}
	}
	return spec
}

// checkInjected: exactly the native sidecar was added, nothing runs as an
// init step, and no container gains a capability.
func checkInjected(t *testing.T, p *corev1.Pod) {
	t.Helper()
	if p.Annotations["plexus.dev/injected"] != "true" || p.Labels["plexus.dev/proxy-version"] == "" {
		t.Errorf("pod %s lacks the injection annotation or version label: %v %v", p.Name, p.Annotations, p.Labels)
	}
	if len(p.Spec.InitContainers) != 1 {
		t.Fatalf("pod %s has %d init containers, want only the native sidecar", p.Name, len(p.Spec.InitContainers))
	}
	proxy := p.Spec.InitContainers[0]
	if proxy.Name != "plexus-proxy" || proxy.RestartPolicy == nil || *proxy.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("pod %s: init container %s is not a native sidecar", p.Name, proxy.Name)
	}
	for _, ctr := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		if sc := ctr.SecurityContext; sc != nil && sc.Capabilities != nil && len(sc.Capabilities.Add) != 0 {
			t.Errorf("pod %s container %s adds capabilities %v", p.Name, ctr.Name, sc.Capabilities.Add)
		}
		if sc := ctr.SecurityContext; sc != nil && sc.Privileged != nil && *sc.Privileged {
			t.Errorf("pod %s container %s is privileged", p.Name, ctr.Name)
		}
	}
}
