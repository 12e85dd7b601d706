package cniplugin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/plexus-mesh/plexus/cni-plugin/netnsrules"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/cni-plugin/xtables"
	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

const testappImage = "plexus.dev/testapp:dev"

func container(name string, args ...string) corev1.Container {
	return corev1.Container{Name: name, Image: testappImage, ImagePullPolicy: corev1.PullNever, Args: args}
}

// fakeProxy stands in for the sidecar: it answers on the proxy's outbound
// and inbound ports and says which port took the connection. It has the
// inbound source the injector gives the proxy, so its pod gets the
// self-call rules (injectedRules).
func fakeProxy() corev1.Container {
	c := container("plexus-proxy", "serve", ":4140", ":4143")
	c.Env = []corev1.EnvVar{{Name: podcontract.EnvInboundSource, Value: podcontract.DefaultInboundSource}}
	return c
}

// injectedRules are the IPv4 rules of a pod injected with the defaults:
// with the self-call rules.
func injectedRules(t *testing.T) rules.RuleSet {
	t.Helper()
	c := podcontract.Defaults()
	var err error
	if c.InboundSource, err = podcontract.ParseInboundSource(podcontract.DefaultInboundSource); err != nil {
		t.Fatal(err)
	}
	rs, err := rules.Build(c, rules.IPv4)
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// TestKubeletRunsPlexusCNI has the real kubelet and containerd run
// plexus-cni as the last plugin of the primary conflist, then checks each
// pod's network namespace and sends real traffic through the rules.
func TestKubeletRunsPlexusCNI(t *testing.T) {
	env := clustercni.Read(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to read pods' network namespaces")
	}
	c := clustertest.Connect(t)
	logFile := env.Install(t) // before the namespace: its pods' DEL must still run the plugin
	ns := c.Namespace(t, "cni", nil)
	ctx := clustertest.Context(t, 5*time.Minute)

	create := func(pod *corev1.Pod) {
		t.Helper()
		if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatalf("creating pod %s: %v", pod.Name, err)
		}
	}
	pod := func(name string, spec corev1.PodSpec) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
	}

	create(pod("plain", corev1.PodSpec{Containers: []corev1.Container{container("app", "serve", ":8080")}}))
	plain := waitRunning(t, c, ns, "plain")

	// A meshed pod with the proxy as a plain container, whose client calls
	// the plain pod: the call must land on the pod's own port 4140.
	create(pod("meshed", corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{
			fakeProxy(),
			container("app", "serve", ":8080"),
			container("client", "get", fmt.Sprintf("http://%s:8080/outbound", plain.Status.PodIP)),
		},
	}))
	// A meshed pod with the proxy as a native sidecar.
	native := fakeProxy()
	native.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
	create(pod("native", corev1.PodSpec{
		InitContainers: []corev1.Container{native},
		Containers:     []corev1.Container{container("app", "serve", ":8080")},
	}))
	meshed := waitRunning(t, c, ns, "meshed")
	nativePod := waitRunning(t, c, ns, "native")

	// Inbound: a plain client calling the meshed pods' app port must land on
	// their port 4143.
	create(pod("inbound-client", corev1.PodSpec{
		RestartPolicy: corev1.RestartPolicyNever,
		Containers: []corev1.Container{container("client", "get",
			fmt.Sprintf("http://%s:8080/inbound", meshed.Status.PodIP),
			fmt.Sprintf("http://%s:8080/inbound", nativePod.Status.PodIP))},
	}))

	t.Run("rules", func(t *testing.T) {
		want := injectedRules(t)
		tables := netnsrules.NewNetnsTables(xtables.Auto, 10*time.Second, slog.New(slog.DiscardHandler))
		for _, p := range []*corev1.Pod{meshed, nativePod, plain} {
			state, err := tables.Current(ctx, clustercni.PodNetns(t, string(p.UID)), []rules.Family{rules.IPv4})
			if err != nil {
				t.Fatalf("reading rules of pod %s: %v", p.Name, err)
			}
			expect := &want
			if p.Name == "plain" {
				expect = nil
			}
			if err := rules.Compare(expect, state[rules.IPv4]); err != nil {
				t.Errorf("pod %s: %v", p.Name, err)
			}
		}
	})

	t.Run("outbound traffic is redirected to 4140", func(t *testing.T) {
		logs := finishedLogs(t, c, ns, "meshed", "client")
		if err := contains(logs, "hello from meshed port=4140 path=/outbound"); err != nil {
			t.Error(err)
		}
	})
	t.Run("inbound traffic is redirected to 4143", func(t *testing.T) {
		logs := finishedLogs(t, c, ns, "inbound-client", "client")
		for _, want := range []string{"hello from meshed port=4143 path=/inbound", "hello from native port=4143 path=/inbound"} {
			if err := contains(logs, want); err != nil {
				t.Error(err)
			}
		}
	})
	t.Run("plugin log names the pods", func(t *testing.T) {
		raw, err := os.ReadFile(logFile)
		if err != nil {
			t.Fatalf("plugin log: %v", err)
		}
		for _, name := range []string{"meshed", "native", "plain"} {
			if !strings.Contains(string(raw), name) {
				t.Errorf("plugin log does not mention pod %s:\n%s", name, raw)
			}
		}
	})
}

func waitRunning(t *testing.T, c *clustertest.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	clustertest.WaitFor(t, 2*time.Minute, "pod "+ns+"/"+name+" running with an IP", func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		pod = p
		return p.Status.Phase == corev1.PodRunning && p.Status.PodIP != "", nil
	})
	return pod
}

// finishedLogs waits for one container to exit 0 and returns its logs.
func finishedLogs(t *testing.T, c *clustertest.Cluster, ns, pod, ctr string) string {
	t.Helper()
	var exit *corev1.ContainerStateTerminated
	clustertest.WaitFor(t, 2*time.Minute, "container "+pod+"/"+ctr+" to finish", func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, s := range p.Status.ContainerStatuses {
			if s.Name == ctr && s.State.Terminated != nil {
				exit = s.State.Terminated
				return true, nil
			}
		}
		return false, nil
	})
	logs, err := c.Logs(context.Background(), ns, pod, ctr)
	if err != nil {
		t.Fatal(err)
	}
	if exit.ExitCode != 0 {
		t.Fatalf("container %s/%s exited %d: %s\n%s", pod, ctr, exit.ExitCode, exit.Message, logs)
	}
	return logs
}
