package cniplugin

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/cni-plugin/netnsrules"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/cni-plugin/xtables"
	"github.com/plexus-mesh/plexus/daemonset/plugininstall"
	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

const (
	agentNamespace = "plexus-system"
	manifestDir    = "../../deploy/plexus-node"
)

// TestNodeAgentInstallsPlugin applies deploy/plexus-node to the local
// cluster (host paths pointed at the cluster's CNI dirs) and checks the
// agent's whole life on a real node: it installs and patches, meshed pods
// get rules and their ADD shows in the agent's metrics, a removed binary
// is back within a second, a hand-overwritten conflist is re-patched
// within a second,
// removing the DaemonSet (an upgrade) keeps the plugin, and `plexus-node
// uninstall` leaves the conflist byte for byte as it was.
func TestNodeAgentInstallsPlugin(t *testing.T) {
	env := clustercni.Read(t)
	stateRoot, agentBin := env.StateDir, os.Getenv("PLEXUS_NODE_BIN")
	if agentBin == "" {
		t.Skip("PLEXUS_NODE_BIN is not set (run `make test`)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to read pods' network namespaces")
	}
	c := clustertest.Connect(t)
	primary, original := env.KeepNodeCNI(t)
	stateDir := filepath.Join(stateRoot, "plexus-node-state")
	t.Cleanup(func() { os.RemoveAll(stateDir) })

	deployAgent(t, c, env, stateDir)
	ctx := clustertest.Context(t, 5*time.Minute)

	t.Run("installed", func(t *testing.T) {
		if _, err := os.Stat(filepath.Join(env.BinDir, "plexus-cni")); err != nil {
			t.Errorf("plugin binary not installed: %v", err)
		}
		waitPatched(t, primary, 5*time.Second)
	})

	ns := c.Namespace(t, "nodeagent", nil)
	t.Run("meshed pod gets rules", func(t *testing.T) {
		checkMeshedPod(t, c, ns, "meshed-1")
	})

	t.Run("the plugin's ADD is in the agent's metrics", func(t *testing.T) {
		// The agent runs on the host network; its state dir holds the
		// report socket the plugin sent the ADD above to.
		if _, err := os.Lstat(filepath.Join(stateDir, "reports.sock")); err != nil {
			t.Errorf("report socket: %v", err)
		}
		clustertest.WaitFor(t, 10*time.Second, "an ADD success in the agent's metrics", func(context.Context) (bool, error) {
			resp, err := http.Get("http://127.0.0.1:9190/metrics")
			if err != nil {
				return false, nil
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			return err == nil && regexp.MustCompile(`(?m)^plexus_node_plugin_commands_total\{command="ADD",outcome="success"\} [1-9]`).Match(body), nil
		})
	})

	t.Run("the plugin read the pod from the agent's cache", func(t *testing.T) {
		// The plugin on the host asked the agent in its pod through the
		// pod socket in the shared state dir, not the API server.
		if _, err := os.Lstat(filepath.Join(stateDir, "pods.sock")); err != nil {
			t.Errorf("pod socket: %v", err)
		}
		resp, err := http.Get("http://127.0.0.1:9190/metrics")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if !regexp.MustCompile(`(?m)^plexus_node_pod_lookups_total\{result="hit"\} [1-9]`).Match(body) {
			t.Errorf("no pod lookup answered from the agent's cache:\n%s", regexp.MustCompile(`(?m)^plexus_node_pod_lookups.*$`).FindAll(body, -1))
		}
	})

	t.Run("a removed binary is back within 1s", func(t *testing.T) {
		bin := filepath.Join(env.BinDir, "plexus-cni")
		if err := os.Remove(bin); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		clustertest.WaitFor(t, 5*time.Second, bin+" to be back", func(context.Context) (bool, error) {
			_, err := os.Stat(bin)
			return err == nil, nil
		})
		if took := time.Since(start); took > time.Second {
			t.Errorf("binary back after %s, want within 1s", took)
		}
	})

	t.Run("re-patched within 1s after a hand overwrite", func(t *testing.T) {
		clustercni.WriteAtomic(t, primary, original, 0o644)
		start := time.Now()
		waitPatched(t, primary, 5*time.Second)
		if took := time.Since(start); took > time.Second {
			t.Errorf("re-patched after %s, want within 1s", took)
		}
		checkMeshedPod(t, c, ns, "meshed-2")
	})

	t.Run("deleting the DaemonSet removes the plugin and pods still start", func(t *testing.T) {
		err := c.Client.AppsV1().DaemonSets(agentNamespace).Delete(ctx, "plexus-node", metav1.DeleteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		clustertest.WaitFor(t, time.Minute, "the agent's pods to be gone", func(ctx context.Context) (bool, error) {
			pods, err := c.Client.CoreV1().Pods(agentNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=plexus-node"})
			return err == nil && len(pods.Items) == 0, err
		})
		// The agent's last act: its DaemonSet is gone, so it uninstalled
		// rather than leave a plugin whose token died with its pod.
		got, err := os.ReadFile(primary)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, original) {
			t.Errorf("conflist after the DaemonSet was deleted differs from before install:\n--- before\n%s\n--- after\n%s", original, got)
		}
		for _, gone := range []string{filepath.Join(env.BinDir, "plexus-cni"), filepath.Join(stateDir, plugininstall.KubeconfigFile)} {
			if _, err := os.Stat(gone); !os.IsNotExist(err) {
				t.Errorf("%s still there after the DaemonSet was deleted (err=%v)", gone, err)
			}
		}
		_, err = c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "after-removal"},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{container("app", "serve", ":8080")}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		waitRunning(t, c, ns, "after-removal")
	})

	t.Run("uninstall after that is a no-op that keeps the conflist byte for byte", func(t *testing.T) {
		out, err := exec.Command(agentBin, "uninstall", "--root=/", "--cni-bin-dir="+env.BinDir,
			"--cni-conf-dir="+env.ConfDir, "--state-dir="+stateDir).CombinedOutput()
		if err != nil {
			t.Fatalf("plexus-node uninstall: %v: %s", err, out)
		}
		got, err := os.ReadFile(primary)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, original) {
			t.Errorf("conflist after uninstall differs from before install:\n--- before\n%s\n--- after\n%s", original, got)
		}
		if _, err := os.Stat(filepath.Join(env.BinDir, "plexus-cni")); !os.IsNotExist(err) {
			t.Errorf("plugin binary still installed after uninstall (err=%v)", err)
		}
	})
}

// deployAgent applies the manifests of deploy/plexus-node with the
// DaemonSet's host paths moved to the local cluster's, and waits until the
// agent is ready. Everything is deleted when the test ends.
func deployAgent(t *testing.T, c *clustertest.Cluster, env clustercni.Env, stateDir string) {
	t.Helper()
	ctx := clustertest.Context(t, 3*time.Minute)
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	others := []string{"serviceaccount.yaml", "rbac.yaml", "configmap.yaml"}
	for _, f := range others {
		c.Kubectl(t, "apply", "-f", filepath.Join(manifestDir, f))
	}
	t.Cleanup(func() {
		for _, f := range others {
			exec.Command(os.Getenv(clustertest.EnvKubectl), "--kubeconfig", c.Kubeconfig, "delete", "--ignore-not-found", "-f", filepath.Join(manifestDir, f)).Run()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c.Client.CoreV1().Namespaces().Delete(ctx, agentNamespace, metav1.DeleteOptions{})
		clustertest.Poll(ctx, time.Second, func(ctx context.Context) (bool, error) {
			_, err := c.Client.CoreV1().Namespaces().Get(ctx, agentNamespace, metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		})
	})

	raw, err := os.ReadFile(filepath.Join(manifestDir, "daemonset.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	if err := yaml.UnmarshalStrict(raw, &ds); err != nil {
		t.Fatalf("decoding daemonset.yaml: %v", err)
	}
	relocate(t, &ds, map[string]string{"cni-bin": env.BinDir, "cni-conf": env.ConfDir, "state": stateDir})
	ds.Spec.Template.Spec.Containers[0].ImagePullPolicy = corev1.PullNever
	if _, err := c.Client.AppsV1().DaemonSets(agentNamespace).Create(ctx, &ds, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating the DaemonSet: %v", err)
	}
	clustertest.WaitFor(t, 2*time.Minute, "the plexus-node DaemonSet to be ready", func(ctx context.Context) (bool, error) {
		got, err := c.Client.AppsV1().DaemonSets(agentNamespace).Get(ctx, ds.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		s := got.Status
		return s.DesiredNumberScheduled == 1 && s.NumberReady == 1, nil
	})
}

// relocate moves each named hostPath volume to a new host path, with its
// mount (under /host) and the agent flag that names it.
func relocate(t *testing.T, ds *appsv1.DaemonSet, to map[string]string) {
	t.Helper()
	spec := &ds.Spec.Template.Spec
	ctr := &spec.Containers[0]
	for i := range spec.Volumes {
		v := &spec.Volumes[i]
		dst, ok := to[v.Name]
		if !ok {
			continue
		}
		if v.HostPath == nil {
			t.Fatalf("volume %s is not a hostPath", v.Name)
		}
		old := v.HostPath.Path
		v.HostPath.Path = dst
		found := false
		for j := range ctr.VolumeMounts {
			if ctr.VolumeMounts[j].Name == v.Name {
				ctr.VolumeMounts[j].MountPath = "/host" + dst
				found = true
			}
		}
		flag := false
		for j, a := range ctr.Args {
			if strings.HasSuffix(a, "="+old) {
				ctr.Args[j] = strings.TrimSuffix(a, old) + dst
				flag = true
			}
		}
		if !found || !flag {
			t.Fatalf("volume %s (%s) has no mount or no flag in the agent container", v.Name, old)
		}
	}
}

// waitPatched waits until plexus-cni is the last plugin of the conflist.
func waitPatched(t *testing.T, path string, timeout time.Duration) {
	t.Helper()
	clustertest.WaitFor(t, timeout, path+" to end with plexus-cni", func(context.Context) (bool, error) {
		raw, err := os.ReadFile(path)
		if err != nil {
			return false, err
		}
		var list struct {
			Plugins []struct {
				Type string `json:"type"`
			} `json:"plugins"`
		}
		if err := yaml.Unmarshal(raw, &list); err != nil {
			return false, fmt.Errorf("parsing %s: %w", path, err)
		}
		n := len(list.Plugins)
		return n > 0 && list.Plugins[n-1].Type == "plexus-cni", nil
	})
}

// checkMeshedPod starts a pod with a plexus-proxy container and checks its
// network namespace holds exactly the default rule set.
func checkMeshedPod(t *testing.T, c *clustertest.Cluster, ns, name string) {
	t.Helper()
	ctx := clustertest.Context(t, 2*time.Minute)
	_, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{fakeProxy(), container("app", "serve", ":8080")}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating pod %s: %v", name, err)
	}
	pod := waitRunning(t, c, ns, name)
	want := injectedRules(t)
	tables := netnsrules.NewNetnsTables(xtables.Auto, 10*time.Second, slog.New(slog.DiscardHandler))
	state, err := tables.Current(ctx, clustercni.PodNetns(t, string(pod.UID)), []rules.Family{rules.IPv4})
	if err != nil {
		t.Fatalf("reading rules of pod %s: %v", name, err)
	}
	if err := rules.Compare(&want, state[rules.IPv4]); err != nil {
		t.Errorf("pod %s: %v", name, err)
	}
}

// TestNodeAgentRepairsPodStartedBeforeIt creates a meshed pod while
// plexus-cni is not in the node's CNI config (so it starts without
// redirect rules), then applies deploy/plexus-node: the agent's repair
// (--repair=apply, the shipped default) must write exactly the default
// rules into the pod's network namespace in place, within 30 s of the
// agent being ready, and record a RedirectRepaired Event on the pod.
func TestNodeAgentRepairsPodStartedBeforeIt(t *testing.T) {
	env := clustercni.Read(t)
	if os.Getenv("PLEXUS_NODE_BIN") == "" {
		t.Skip("PLEXUS_NODE_BIN is not set (run `make test`)")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to read pods' network namespaces")
	}
	c := clustertest.Connect(t)
	_, original := env.KeepNodeCNI(t)
	if bytes.Contains(original, []byte(`"plexus-cni"`)) {
		t.Fatalf("the node's primary CNI config already holds plexus-cni; a pod would get its rules at ADD:\n%s", original)
	}
	stateDir := filepath.Join(env.StateDir, "plexus-node-state")
	t.Cleanup(func() { os.RemoveAll(stateDir) })
	ns := c.Namespace(t, "repair", nil)
	ctx := clustertest.Context(t, 5*time.Minute)

	// The pod's controller does not matter in apply mode; a bare pod.
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "early"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{fakeProxy(), container("app", "serve", ":8080")}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pod := waitRunning(t, c, ns, "early")
	netns := clustercni.PodNetns(t, string(pod.UID))
	tables := netnsrules.NewNetnsTables(xtables.Auto, 10*time.Second, slog.New(slog.DiscardHandler))
	current := func(ctx context.Context) (rules.State, error) {
		st, err := tables.Current(ctx, netns, []rules.Family{rules.IPv4})
		return st[rules.IPv4], err
	}
	before, err := current(ctx)
	if err != nil {
		t.Fatalf("reading the pod's rules: %v", err)
	}
	if err := rules.Compare(nil, before); err != nil {
		t.Fatalf("the pod started with plexus rules although plexus-cni was not installed: %v", err)
	}

	applied := time.Now()
	deployAgent(t, c, env, stateDir)
	ready := time.Now()
	t.Logf("agent ready %v after the DaemonSet was applied", ready.Sub(applied).Round(time.Millisecond))

	want := injectedRules(t)
	clustertest.WaitFor(t, 30*time.Second, "the pod's default redirect rules", func(ctx context.Context) (bool, error) {
		st, err := current(ctx)
		if err == nil {
			err = rules.Compare(&want, st) // kept for the timeout message
		}
		return err == nil, err
	})
	t.Logf("rules in place %v after the agent was ready (%v after apply)",
		time.Since(ready).Round(time.Millisecond), time.Since(applied).Round(time.Millisecond))

	describe := metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.name=early,involvedObject.uid=" + string(pod.UID)}
	clustertest.WaitFor(t, 30*time.Second, "a RedirectRepaired Event on the pod", func(ctx context.Context) (bool, error) {
		evs, err := c.Client.CoreV1().Events(ns).List(ctx, describe)
		if err != nil {
			return false, err
		}
		for _, e := range evs.Items {
			if e.Reason == "RedirectRepaired" && e.Type == corev1.EventTypeNormal && e.Source.Component == "plexus-node" {
				return true, nil
			}
		}
		return false, nil
	})

	// Repaired in place: the same pod, not restarted, one Event.
	got, err := c.Client.CoreV1().Pods(ns).Get(ctx, "early", metav1.GetOptions{})
	if err != nil || got.UID != pod.UID {
		t.Fatalf("pod replaced or gone: %v", err)
	}
	for _, s := range got.Status.ContainerStatuses {
		if s.RestartCount != 0 {
			t.Errorf("container %s restarted %d times", s.Name, s.RestartCount)
		}
	}
	evs, err := c.Client.CoreV1().Events(ns).List(ctx, describe)
	if err != nil {
		t.Fatal(err)
	}
	repaired := 0
	for _, e := range evs.Items {
		if e.Reason == "RedirectRepaired" {
			repaired++
		}
	}
	if repaired != 1 {
		t.Errorf("%d RedirectRepaired Events, want exactly one", repaired)
	}
}
