package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/cni-plugin/pluginreport"
	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
	"github.com/plexus-mesh/plexus/daemonset/conflist"
	"github.com/plexus-mesh/plexus/daemonset/nodeevents"
	"github.com/plexus-mesh/plexus/daemonset/nodetaint"
	"github.com/plexus-mesh/plexus/daemonset/plugininstall"
	"github.com/plexus-mesh/plexus/daemonset/repair"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

const flannel = `{
  "name": "cbr0",
  "cniVersion": "0.3.1",
  "plugins": [
    {"type": "flannel", "delegate": {"hairpinMode": true, "isDefaultGateway": true}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`

func mkfile(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

// node builds a fake host root and the agent's own files beside it.
func node(t *testing.T, conf map[string]string) (RunConfig, string) {
	t.Helper()
	dir := t.TempDir()
	root := filepath.Join(dir, "host")
	for name, body := range conf {
		mkfile(t, filepath.Join(root, DefaultCNIConfDir, name), body, 0o644)
	}
	if err := os.MkdirAll(filepath.Join(root, DefaultCNIBinDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, DefaultCNIConfDir), 0o755); err != nil {
		t.Fatal(err)
	}
	own := filepath.Join(dir, "agent")
	mkfile(t, filepath.Join(own, "plexus-cni"), "#!/bin/sh\nexit 0\n", 0o755)
	mkfile(t, filepath.Join(own, "plugin.json"), `{"log_level":"debug"}`, 0o644)
	mkfile(t, filepath.Join(own, "sa/token"), "tok-1", 0o644)
	mkfile(t, filepath.Join(own, "sa/ca.crt"), "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n", 0o644)
	return RunConfig{
		Paths:        Paths{Root: root},
		PluginBinary: filepath.Join(own, "plexus-cni"),
		PluginConfig: filepath.Join(own, "plugin.json"),
		APIServer:    "https://10.96.0.1:443",
		CAFile:       filepath.Join(own, "sa/ca.crt"),
		TokenSource:  filepath.Join(own, "sa/token"),
		Listen:       "127.0.0.1:0",
	}, root
}

type running struct {
	url  string
	stop func() error
}

// startRun runs the agent; deps may carry Taint and Events.
func startRun(t *testing.T, cfg RunConfig, deps Deps) running {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	deps.Registry, deps.Log, deps.Listener = prometheus.NewRegistry(), log, ln
	go func() { done <- Run(ctx, cfg, deps) }()
	stopped := false
	var runErr error
	stop := func() error {
		if !stopped {
			stopped = true
			cancel()
			runErr = <-done
		}
		return runErr
	}
	t.Cleanup(func() { stop() })
	return running{url: "http://" + ln.Addr().String(), stop: stop}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitFor(t *testing.T, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	eventually.Within(t, limit, what, cond)
}

func TestRunInstallsGuardsAndLeavesPluginOnStop(t *testing.T) {
	cfg, root := node(t, map[string]string{"10-flannel.conflist": flannel})
	r := startRun(t, cfg, Deps{})
	waitFor(t, 3*time.Second, "/ready 200", func() bool { c, _ := get(t, r.url+"/ready"); return c == 200 })

	conf := filepath.Join(root, DefaultCNIConfDir, "10-flannel.conflist")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	// The entry names host paths, not the agent's /host view.
	if !conflist.Contains(b) || !strings.Contains(string(b), `"kubeconfig": "/var/lib/plexus/plexus-cni.kubeconfig"`) || !strings.Contains(string(b), `"log_level": "debug"`) {
		t.Fatalf("conflist:\n%s", b)
	}
	for path, mode := range map[string]os.FileMode{
		filepath.Join(root, DefaultCNIBinDir, plugininstall.PluginBinary):  0o755,
		filepath.Join(root, DefaultStateDir, plugininstall.KubeconfigFile): 0o600,
		filepath.Join(root, DefaultStateDir, plugininstall.TokenFile):      0o600,
	} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode().Perm() != mode {
			t.Fatalf("%s: %v, %v; want mode %v", path, fi, err, mode)
		}
	}

	// Another component rewrites the primary config: back within 1s.
	mkfile(t, conf, flannel, 0o644)
	t0 := time.Now()
	waitFor(t, time.Second, "re-patch", func() bool { b, _ := os.ReadFile(conf); return conflist.Contains(b) })
	t.Logf("re-patched in %v", time.Since(t0))
	waitFor(t, time.Second, "metrics", func() bool {
		_, m := get(t, r.url+"/metrics")
		return strings.Contains(m, `plexus_node_installs_total{what="conflist"} 1`) &&
			strings.Contains(m, "plexus_node_repatches_total 1") &&
			strings.Contains(m, "plexus_node_ready 1")
	})

	// SIGTERM (upgrade): everything stays.
	if err := r.stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	b, _ = os.ReadFile(conf)
	if !conflist.Contains(b) {
		t.Fatal("stopping removed the plugin from the conflist")
	}
	if _, err := os.Stat(filepath.Join(root, DefaultCNIBinDir, plugininstall.PluginBinary)); err != nil {
		t.Fatal("stopping removed the binary")
	}

	// Uninstall: conflist as before install, byte for byte; files gone.
	if err := Uninstall(cfg.Paths); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(conf); !bytes.Equal(b, []byte(flannel)) {
		t.Fatalf("after uninstall:\n%s", b)
	}
	for _, p := range []string{
		filepath.Join(root, DefaultCNIBinDir, plugininstall.PluginBinary),
		filepath.Join(root, DefaultStateDir),
	} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s still there after uninstall: %v", p, err)
		}
	}
}

func TestRunNotReadyOnInvalidConfig(t *testing.T) {
	bad := `{"name": "cbr0", "plugins": [`
	cfg, root := node(t, map[string]string{"10-flannel.conflist": bad})
	r := startRun(t, cfg, Deps{})
	conf := filepath.Join(root, DefaultCNIConfDir, "10-flannel.conflist")
	waitFor(t, 3*time.Second, "an error metric", func() bool {
		_, m := get(t, r.url+"/metrics")
		return strings.Contains(m, `plexus_node_errors_total{stage="patch"} 1`)
	})
	code, body := get(t, r.url+"/ready")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, conf) {
		t.Fatalf("/ready = %d %q; want 503 naming %s", code, body, conf)
	}
	if b, _ := os.ReadFile(conf); string(b) != bad {
		t.Fatal("invalid config was rewritten")
	}
}

func TestRunUnwritableBinDir(t *testing.T) {
	cfg, root := node(t, map[string]string{"10-flannel.conflist": flannel})
	if err := os.RemoveAll(filepath.Join(root, DefaultCNIBinDir)); err != nil {
		t.Fatal(err)
	}
	mkfile(t, filepath.Join(root, DefaultCNIBinDir), "not a dir", 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	err = Run(context.Background(), cfg, Deps{Registry: prometheus.NewRegistry(), Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Listener: ln})
	if err == nil || !strings.Contains(err.Error(), "CNI bin dir") {
		t.Fatalf("err = %v, want a CNI bin dir error", err)
	}
}

func TestInstallImage(t *testing.T) {
	bridge := `{"cniVersion":"1.0.0","name":"n","type":"bridge","bridge":"cni0"}` + "\n"
	cfg, root := node(t, map[string]string{"10-bridge.conf": bridge})
	img := ImageConfig{Paths: cfg.Paths, PluginBinary: cfg.PluginBinary, Kubeconfig: "/var/lib/kubelet/kubeconfig"}
	res, err := InstallImage(img)
	if err != nil {
		t.Fatal(err)
	}
	list := filepath.Join(root, DefaultCNIConfDir, "10-bridge.conflist")
	if res.Conflist.Path != list {
		t.Fatalf("result %+v", res)
	}
	b, _ := os.ReadFile(list)
	if !conflist.Contains(b) || !strings.Contains(string(b), `"kubeconfig": "/var/lib/kubelet/kubeconfig"`) {
		t.Fatalf("conflist:\n%s", b)
	}
	// No credentials of our own in image mode.
	if _, err := os.Stat(filepath.Join(root, DefaultStateDir, plugininstall.KubeconfigFile)); !os.IsNotExist(err) {
		t.Fatalf("credentials written in image mode: %v", err)
	}
	if err := Uninstall(img.Paths); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(root, DefaultCNIConfDir, "10-bridge.conf")); string(b) != bridge {
		t.Fatalf(".conf after uninstall: %q", b)
	}
	if _, err := os.Stat(list); !os.IsNotExist(err) {
		t.Fatalf(".conflist left after uninstall: %v", err)
	}
}

func TestInstallImageWithoutPrimaryConfig(t *testing.T) {
	cfg, root := node(t, nil)
	img := ImageConfig{Paths: cfg.Paths, PluginBinary: cfg.PluginBinary, Kubeconfig: "/var/lib/kubelet/kubeconfig"}
	if _, err := InstallImage(img); err == nil || !strings.Contains(err.Error(), "no CNI network config") {
		t.Fatalf("err = %v, want no-config error", err)
	}
	img.AllowNoConfig = true
	res, err := InstallImage(img)
	if err != nil || !res.NoConfig {
		t.Fatalf("AllowNoConfig: %+v, %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(root, DefaultCNIBinDir, plugininstall.PluginBinary)); err != nil {
		t.Fatal(err)
	}
}

func TestPathsValidate(t *testing.T) {
	p := Paths{StateDir: "/etc/cni/net.d/plexus"}
	if err := p.Validate(); err == nil {
		t.Fatal("state dir inside the conf dir accepted")
	}
	p = Paths{CNIBinDir: "opt/cni/bin"}
	if err := p.Validate(); err == nil {
		t.Fatal("relative bin dir accepted")
	}
	p = Paths{}
	if err := p.Validate(); err != nil || p.CNIConfDir != DefaultCNIConfDir || p.Root != "/" {
		t.Fatalf("defaults: %+v, %v", p, err)
	}
}

func TestRunWithNodeKubeconfigWritesNoCredentials(t *testing.T) {
	cfg, root := node(t, map[string]string{"10-flannel.conflist": flannel})
	cfg.Kubeconfig = "/var/lib/kubelet/kubeconfig"
	cfg.APIServer, cfg.CAFile, cfg.TokenSource = "", "", ""
	r := startRun(t, cfg, Deps{})
	waitFor(t, 3*time.Second, "/ready 200", func() bool { c, _ := get(t, r.url+"/ready"); return c == 200 })
	b, _ := os.ReadFile(filepath.Join(root, DefaultCNIConfDir, "10-flannel.conflist"))
	if !strings.Contains(string(b), `"kubeconfig": "/var/lib/kubelet/kubeconfig"`) {
		t.Fatalf("conflist:\n%s", b)
	}
	for _, f := range []string{plugininstall.KubeconfigFile, plugininstall.TokenFile} {
		if _, err := os.Stat(filepath.Join(root, DefaultStateDir, f)); !os.IsNotExist(err) {
			t.Errorf("%s written with a node kubeconfig: %v", f, err)
		}
	}
}

// The Remover itself is tested against a real kube-apiserver in
// nodetaint; this checks the agent calls it when, and only when, ready.
func TestRunRemovesTaintOnlyWhenReady(t *testing.T) {
	taintedNode := func() *corev1.Node {
		return &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: "n1", ResourceVersion: "1"},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: nodetaint.Key, Effect: corev1.TaintEffectNoSchedule}}},
		}
	}
	hasTaint := func(c *fake.Clientset) bool {
		n, err := c.CoreV1().Nodes().Get(context.Background(), "n1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(n.Spec.Taints) > 0
	}

	bad := `{"name": "cbr0", "plugins": [`
	cfg, root := node(t, map[string]string{"10-flannel.conflist": bad})
	client := fake.NewClientset(taintedNode())
	r := startRun(t, cfg, Deps{Taint: &nodetaint.Remover{Client: client, Node: "n1"}})
	// Sleep: a taint removal while not ready would have come by now; its absence has no event.
	time.Sleep(500 * time.Millisecond)
	if !hasTaint(client) {
		t.Fatal("taint removed while not ready")
	}
	mkfile(t, filepath.Join(root, DefaultCNIConfDir, "10-flannel.conflist"), flannel, 0o644)
	waitFor(t, 2*time.Second, "taint removed once ready", func() bool { return !hasTaint(client) })
	waitFor(t, time.Second, "metric", func() bool {
		_, m := get(t, r.url+"/metrics")
		return strings.Contains(m, "plexus_node_taint_removals_total 1")
	})
}

func TestRunRecordsInvalidConfigEvent(t *testing.T) {
	bad := `{"name": "cbr0", "plugins": [`
	cfg, root := node(t, map[string]string{"10-flannel.conflist": bad})
	client := fake.NewClientset()
	startRun(t, cfg, Deps{Events: &nodeevents.Recorder{Client: client, Node: "n1"}})
	conf := filepath.Join(root, DefaultCNIConfDir, "10-flannel.conflist")
	waitFor(t, 3*time.Second, "a CNIConfigInvalid event naming the file", func() bool {
		list, err := client.CoreV1().Events("default").List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Reason == "CNIConfigInvalid" && e.Type == corev1.EventTypeWarning && e.InvolvedObject.Name == "n1" && strings.Contains(e.Message, conf) {
				return true
			}
		}
		return false
	})
}

// TestRunPutsBackRemovedBinary: the bin dir is watched, so a removed or
// replaced binary is back within 1s, long before the 30s resync.
func TestRunPutsBackRemovedBinary(t *testing.T) {
	cfg, root := node(t, map[string]string{"10-flannel.conflist": flannel})
	r := startRun(t, cfg, Deps{})
	waitFor(t, 3*time.Second, "/ready 200", func() bool { c, _ := get(t, r.url+"/ready"); return c == 200 })
	// Sleep: the patch the agent's own conflist write triggers changes nothing, so nothing marks it.
	time.Sleep(200 * time.Millisecond)
	want, err := os.ReadFile(cfg.PluginBinary)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(root, DefaultCNIBinDir, plugininstall.PluginBinary)
	installs := 1
	for _, change := range []struct {
		what string
		do   func() error
	}{
		{"removed", func() error { return os.Remove(bin) }},
		// Same size, other content: a size check alone would miss it.
		{"overwritten in place", func() error { return os.WriteFile(bin, bytes.ToUpper(want), 0o755) }},
		{"made not executable", func() error { return os.Chmod(bin, 0o644) }},
	} {
		if err := change.do(); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		waitFor(t, time.Second, "binary back after it was "+change.what, func() bool {
			fi, err := os.Stat(bin)
			got, _ := os.ReadFile(bin)
			return err == nil && fi.Mode().Perm() == 0o755 && bytes.Equal(got, want)
		})
		t.Logf("binary back %v after it was %s", time.Since(t0), change.what)
		installs++
		waitFor(t, time.Second, "metric", func() bool {
			_, m := get(t, r.url+"/metrics")
			return strings.Contains(m, fmt.Sprintf(`plexus_node_installs_total{what="binary"} %d`, installs))
		})
	}
}

func TestRunCountsReports(t *testing.T) {
	cfg, root := node(t, map[string]string{"10-flannel.conflist": flannel})
	r := startRun(t, cfg, Deps{})
	waitFor(t, 3*time.Second, "/ready 200", func() bool { c, _ := get(t, r.url+"/ready"); return c == 200 })
	conf := filepath.Join(root, DefaultCNIConfDir, "10-flannel.conflist")
	b, _ := os.ReadFile(conf)
	if !strings.Contains(string(b), `"report_socket": "/var/lib/plexus/reports.sock"`) {
		t.Fatalf("the entry does not name the report socket by its host path:\n%s", b)
	}
	sock := filepath.Join(root, DefaultStateDir, ReportSocketFile)
	if fi, err := os.Lstat(sock); err != nil || fi.Mode().Type() != os.ModeSocket || fi.Mode().Perm() != 0o600 {
		t.Fatalf("report socket %s: %v, %v; want a socket, mode 0600", sock, fi, err)
	}
	for _, rep := range []pluginreport.Report{
		{Command: "ADD", Outcome: "success", ElapsedMS: 21.5, DecideMS: 11},
		{Command: "ADD", Outcome: "error", Code: 101, ElapsedMS: 2000},
	} {
		if err := pluginreport.Send(sock, rep); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, time.Second, "plugin metrics", func() bool {
		_, m := get(t, r.url+"/metrics")
		return strings.Contains(m, `plexus_node_plugin_commands_total{command="ADD",outcome="success"} 1`) &&
			strings.Contains(m, `plexus_node_plugin_errors_total{code="101",command="ADD"} 1`) &&
			strings.Contains(m, `plexus_node_plugin_duration_seconds_bucket{command="ADD",le="0.03"} 1`) &&
			strings.Contains(m, `plexus_node_plugin_duration_seconds_bucket{command="ADD",le="2.5"} 2`)
	})

	if err := r.stop(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Second, "socket removed on stop", func() bool { _, err := os.Lstat(sock); return os.IsNotExist(err) })
	if b, _ := os.ReadFile(conf); !conflist.Contains(b) {
		t.Fatal("stopping removed the plugin from the conflist")
	}
	// A killed agent leaves its socket; uninstall removes it with the rest.
	l, err := pluginreport.Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := Uninstall(cfg.Paths); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, DefaultStateDir)); !os.IsNotExist(err) {
		t.Fatalf("state dir left after uninstall: %v", err)
	}
}

func TestRunWithoutReportSocket(t *testing.T) {
	cfg, root := node(t, map[string]string{"10-flannel.conflist": flannel})
	cfg.StateDir = "/var/lib/" + strings.Repeat("p", 100) // too long for a socket path
	r := startRun(t, cfg, Deps{})
	waitFor(t, 3*time.Second, "/ready 200", func() bool { c, _ := get(t, r.url+"/ready"); return c == 200 })
	b, _ := os.ReadFile(filepath.Join(root, DefaultCNIConfDir, "10-flannel.conflist"))
	if !conflist.Contains(b) || strings.Contains(string(b), "report_socket") {
		t.Fatalf("want the entry without report_socket:\n%s", b)
	}
	if _, m := get(t, r.url+"/metrics"); !strings.Contains(m, `plexus_node_errors_total{stage="report"} 1`) {
		t.Fatalf("no report error counted:\n%s", m)
	}
}

// TestRunStartsRepair checks the wiring only (daemonset/repair tests the
// repair): the metrics are on the agent's registry and, where iptables
// can be read (root), the node's meshed pod is checked.
func TestRunStartsRepair(t *testing.T) {
	cfg, _ := node(t, map[string]string{"10-flannel.conflist": flannel})
	cfg.Repair = repair.Config{Mode: repair.Off, Node: "n1", Resync: time.Second}
	cfg.NetnsDir = "/run/netns-none" // under the fake root: no namespaces at all
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1"},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "plexus-proxy"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, PodIPs: []corev1.PodIP{{IP: "10.244.0.5"}}},
	}
	r := startRun(t, cfg, Deps{Pods: fake.NewClientset(pod)})
	waitFor(t, 2*time.Second, "repair metrics", func() bool {
		_, m := get(t, r.url+"/metrics")
		return strings.Contains(m, `plexus_node_repairs_total{action="applied"} 0`)
	})
	if os.Geteuid() != 0 {
		return
	}
	waitFor(t, 5*time.Second, "the meshed pod checked, its namespace not found", func() bool {
		_, m := get(t, r.url+"/metrics")
		return strings.Contains(m, "plexus_node_pods_checked_total 1") && !strings.Contains(m, `plexus_node_repairs_total{action="failed"} 0`)
	})
}

// TestRunAnswersPodLookups: an agent with an API client serves the
// plugin's pod lookups from its node's informer on the pod socket and
// names that socket in the conflist entry.
func TestRunAnswersPodLookups(t *testing.T) {
	cfg, root := node(t, map[string]string{"10-flannel.conflist": flannel})
	cfg.Repair = repair.Config{Mode: repair.Off, Node: "n1", Resync: time.Minute}
	cfg.NetnsDir = "/run/netns-none"
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web-1", UID: "u-1"},
		Spec:       corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "plexus-proxy"}}},
	}
	startRun(t, cfg, Deps{Pods: fake.NewClientset(pod)})
	conflist := filepath.Join(root, DefaultCNIConfDir, "10-flannel.conflist")
	waitFor(t, 5*time.Second, "the conflist entry naming the pod socket", func() bool {
		b, _ := os.ReadFile(conflist)
		var list struct{ Plugins []map[string]any }
		if json.Unmarshal(b, &list) != nil || len(list.Plugins) == 0 {
			return false
		}
		return list.Plugins[len(list.Plugins)-1]["pod_socket"] == filepath.Join(DefaultStateDir, PodSocketFile)
	})
	g := podrules.NewAgentPodGetter(filepath.Join(root, DefaultStateDir, PodSocketFile), time.Second)
	waitFor(t, 5*time.Second, "the pod from the agent's cache", func() bool {
		got, err := g.GetPod(context.Background(), "shop", "web-1")
		return err == nil && got.UID == "u-1"
	})
}
