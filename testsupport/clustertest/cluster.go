// Package clustertest runs Go tests against the local Kubernetes cluster:
// it connects with client-go, creates throwaway namespaces, waits with
// timeouts, prints pod logs and events when a test fails, and deletes what
// the test created.
package clustertest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Environment variables the harness reads; integration/test.sh sets them.
const (
	EnvKubeconfig  = "PLEXUS_TEST_KUBECONFIG"   // admin kubeconfig of the local cluster
	EnvKubeconfigB = "PLEXUS_TEST_KUBECONFIG_B" // admin kubeconfig of the second local cluster, b, when it runs
	EnvKubectl     = "PLEXUS_KUBECTL"           // kubectl binary of the cluster's version
)

// Cluster is a connection to the local cluster.
type Cluster struct {
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface
}

// Connect returns the cluster named by $PLEXUS_TEST_KUBECONFIG, or skips the
// test when it is unset (the cluster tests run under `make test`).
func Connect(t testing.TB) *Cluster {
	t.Helper()
	return ConnectEnv(t, EnvKubeconfig)
}

// Pair returns the local cluster and the second one beside it, b (make
// cluster-up CLUSTERS=2), or skips the test when $PLEXUS_TEST_KUBECONFIG_B
// is unset.
func Pair(t testing.TB) (a, b *Cluster) {
	t.Helper()
	return Connect(t), ConnectEnv(t, EnvKubeconfigB)
}

// ConnectEnv returns the cluster whose kubeconfig the environment variable
// env names, or skips the test when it is unset.
func ConnectEnv(t testing.TB, env string) *Cluster {
	t.Helper()
	path := os.Getenv(env)
	if path == "" {
		t.Skipf("%s is not set: no local cluster to test against (run `make test`)", env)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatalf("loading kubeconfig %s: %v", path, err)
	}
	cfg.Timeout = 30 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("client for %s: %v", path, err)
	}
	return &Cluster{Kubeconfig: path, Config: cfg, Client: client}
}

// Context returns a context that ends with the test, or after d.
func Context(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Namespace creates a namespace named after prefix with a random suffix. When
// the test ends it prints the namespace's pod logs and events if the test
// failed, then deletes the namespace and waits until it is gone.
func (c *Cluster) Namespace(t testing.TB, prefix string, labels map[string]string) string {
	t.Helper()
	return c.createNamespace(t, metav1.ObjectMeta{GenerateName: prefix + "-", Labels: labels})
}

// NamespaceNamed is Namespace with an exact name (the one another
// cluster's namespace got, say).
func (c *Cluster) NamespaceNamed(t testing.TB, name string, labels map[string]string) string {
	t.Helper()
	return c.createNamespace(t, metav1.ObjectMeta{Name: name, Labels: labels})
}

func (c *Cluster) createNamespace(t testing.TB, meta metav1.ObjectMeta) string {
	t.Helper()
	ctx := Context(t, time.Minute)
	ns, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: meta}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating namespace %s%s: %v", meta.Name, meta.GenerateName, err)
	}
	name := ns.Name
	t.Cleanup(func() {
		if t.Failed() {
			c.Dump(t, name)
		}
		c.deleteNamespace(t, name)
	})
	return name
}

func (c *Cluster) deleteNamespace(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err := c.Client.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	if apierrors.IsNotFound(err) {
		return
	}
	if err != nil {
		t.Errorf("deleting namespace %s: %v", name, err)
		return
	}
	err = Poll(ctx, time.Second, func(ctx context.Context) (bool, error) {
		_, err := c.Client.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Errorf("namespace %s still present after deletion: %v", name, err)
	}
}

// Dump prints the logs of every container of every pod in ns, and the
// namespace's events, to the test log. Each entry starts with "[dump]",
// which integration/test.sh's failure summary leaves out.
func (c *Cluster) Dump(t testing.TB, ns string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("[dump] listing pods in %s: %v", ns, err)
		return
	}
	for _, pod := range pods.Items {
		t.Logf("[dump] pod %s/%s: phase %s on %q, conditions %v", ns, pod.Name, pod.Status.Phase, pod.Spec.NodeName, pod.Status.Conditions)
		for _, ctr := range append(pod.Spec.InitContainers, pod.Spec.Containers...) {
			logs, err := c.Logs(ctx, ns, pod.Name, ctr.Name)
			if err != nil {
				logs = "(" + err.Error() + ")"
			}
			t.Logf("[dump] --- logs of %s/%s[%s]:\n%s", ns, pod.Name, ctr.Name, logs)
		}
	}
	events, err := c.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Logf("[dump] listing events in %s: %v", ns, err)
		return
	}
	for _, e := range events.Items {
		t.Logf("[dump] event %s %s/%s: %s: %s", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
}

// Logs returns the logs of one container.
func (c *Cluster) Logs(ctx context.Context, ns, pod, container string) (string, error) {
	raw, err := c.Client.CoreV1().Pods(ns).GetLogs(pod, &corev1.PodLogOptions{Container: container}).DoRaw(ctx)
	if err != nil {
		return "", fmt.Errorf("logs of %s/%s[%s]: %w", ns, pod, container, err)
	}
	return string(raw), nil
}

// Kubectl runs the cluster's kubectl against the cluster and returns its
// standard output; the test fails if kubectl does.
func (c *Cluster) Kubectl(t testing.TB, args ...string) string {
	t.Helper()
	out, err := c.TryKubectl(args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TryKubectl runs the cluster's kubectl against the cluster for at most a
// minute and returns its standard output, or an error with its standard
// error (for cleanups, which must not fail the test).
func (c *Cluster) TryKubectl(args ...string) (string, error) {
	bin := os.Getenv(EnvKubectl)
	if bin == "" {
		bin = "kubectl"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}
