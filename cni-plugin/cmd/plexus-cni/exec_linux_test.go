package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/cni-plugin/addlog"
	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
	"github.com/plexus-mesh/plexus/testsupport/loadgen"
)

// These benchmarks run plexus-cni as a container runtime does: a fresh
// process per call. They build the plugin from this tree;
// $PLEXUS_CNI_BASELINE lists other plexus-cni binaries (say, built from
// older commits), separated by colons and named by file name, that are
// timed in the same run, call for call in turn with ours, so a comparison
// survives a machine whose load changes during the run.
const envBaseline = "PLEXUS_CNI_BASELINE"

var built struct {
	once sync.Once
	dir  string
	err  error
}

// buildBinaries builds plexus-cni from this tree and an empty Go program
// (the floor any Go binary pays to start) into one directory, once.
func buildBinaries(tb testing.TB) (plugin, empty string) {
	tb.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "plexus-cni-exec-")
		if built.err != nil {
			return
		}
		gobin := filepath.Join(runtime.GOROOT(), "bin", "go")
		build := func(dir string, args ...string) error {
			cmd := exec.Command(gobin, append([]string{"build"}, args...)...)
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("go build %s: %w\n%s", strings.Join(args, " "), err, out)
			}
			return nil
		}
		if built.err = build("", "-o", filepath.Join(built.dir, "plexus-cni"), "github.com/plexus-mesh/plexus/cni-plugin/cmd/plexus-cni"); built.err != nil {
			return
		}
		src := filepath.Join(built.dir, "empty-src")
		if built.err = os.MkdirAll(src, 0o755); built.err != nil {
			return
		}
		for name, text := range map[string]string{"go.mod": "module empty\n\ngo 1.26\n", "main.go": "package main\n\nfunc main() {}\n"} {
			if built.err = os.WriteFile(filepath.Join(src, name), []byte(text), 0o644); built.err != nil {
				return
			}
		}
		built.err = build(src, "-o", filepath.Join(built.dir, "go-empty"), ".")
	})
	if built.err != nil {
		tb.Fatal(built.err)
	}
	return filepath.Join(built.dir, "plexus-cni"), filepath.Join(built.dir, "go-empty")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		_ = os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// candidate is one program being timed, with its samples.
type candidate struct {
	name      string
	path      string
	args      []string
	env       []string
	logFile   string // plexus-cni's log, for its in-process times
	wall, cpu []time.Duration
}

// run execs c once with stdin and returns its combined output.
func (c *candidate) run(tb testing.TB, stdin []byte) []byte {
	tb.Helper()
	cmd := exec.Command(c.path, c.args...)
	cmd.Env = c.env
	cmd.Stdin = bytes.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	wall := time.Since(start)
	if err != nil {
		tb.Fatalf("%s: %v\n%s", c.name, err, out.Bytes())
	}
	c.wall = append(c.wall, wall)
	c.cpu = append(c.cpu, cmd.ProcessState.UserTime()+cmd.ProcessState.SystemTime())
	return out.Bytes()
}

func (c *candidate) report(b *testing.B) {
	wall, cpu := loadgen.Summarize(c.wall), loadgen.Summarize(c.cpu)
	b.ReportMetric(msOf(wall.P50), c.name+"-p50-ms")
	b.ReportMetric(msOf(wall.P99), c.name+"-p99-ms")
	b.ReportMetric(msOf(cpu.P50), c.name+"-cpu-p50-ms")
	line := fmt.Sprintf("%-10s n=%d wall p50 %.1f ms p99 %.1f ms, CPU p50 %.1f ms", c.name, wall.Count, msOf(wall.P50), msOf(wall.P99), msOf(cpu.P50))
	if c.logFile != "" {
		decide, total, err := addlog.Times(c.logFile)
		if err != nil {
			b.Fatal(err)
		}
		data, err := os.ReadFile(c.logFile)
		if err != nil {
			b.Fatal(err)
		}
		p50 := func(ds []time.Duration) float64 { return msOf(loadgen.Summarize(ds).P50) }
		line += fmt.Sprintf("\n\tin-process p50s (its log): ADD %.1f ms = decide %.1f ms (of which pod GET %.1f ms) + rules; iptables-restore %.1f ms",
			p50(total), p50(decide), p50(addlog.Durations(data, "pod GET", "get_ms", nil)), p50(addlog.Durations(data, "applied rules", "restore_ms", nil)))
		b.ReportMetric(p50(total), c.name+"-inproc-p50-ms")
	}
	b.Log(line)
}

// baselines are the binaries listed in $PLEXUS_CNI_BASELINE.
func baselines(tb testing.TB, env []string) []*candidate {
	var cands []*candidate
	for _, p := range filepath.SplitList(os.Getenv(envBaseline)) {
		if _, err := os.Stat(p); err != nil {
			tb.Fatalf("%s: %v", envBaseline, err)
		}
		cands = append(cands, &candidate{name: filepath.Base(p), path: p, env: env})
	}
	return cands
}

// BenchmarkStart times process start alone: /bin/true (a C program), an
// empty Go program, and plexus-cni answering VERSION (Go runtime, package
// init, parsing the environment).
func BenchmarkStart(b *testing.B) {
	plugin, empty := buildBinaries(b)
	env := append(os.Environ(), "CNI_COMMAND=VERSION")
	cands := []*candidate{
		{name: "true", path: "/bin/true"},
		{name: "go-empty", path: empty},
		{name: "plexus-cni", path: plugin, env: env},
	}
	cands = append(cands, baselines(b, env)...)
	stdin := []byte(`{"cniVersion":"1.1.0"}`)
	for b.Loop() {
		for _, c := range cands {
			c.run(b, stdin)
		}
	}
	for _, c := range cands {
		c.report(b)
	}
}

// BenchmarkAddExec times ADD of a meshed dual-stack pod by the plugin
// binary: process start, kubeconfig, one pod GET over TLS against a real
// kube-apiserver (as the node agent's RBAC user), and iptables-restore in a
// fresh network namespace, per backend. Needs root, the cached
// kube-apiserver and etcd, and iptables.
func BenchmarkAddExec(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root (network namespaces, iptables)")
	}
	plugin, _ := buildBinaries(b)
	api := apiservertest.Start(b)
	api.BindShippedRole(b)
	const namespace, name = "plexus-bench", "web"
	api.Namespace(b, namespace)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"config.plexus.dev/skip-outbound-ports": "25"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{
			{Name: "app", Image: "registry.invalid/app"},
			{Name: "plexus-proxy", Image: "registry.invalid/proxy"},
		}},
	}
	created, err := api.Client(b, apiservertest.AdminToken).CoreV1().Pods(namespace).Create(context.Background(), pod, metav1.CreateOptions{})
	if err != nil {
		b.Fatal(err)
	}
	kubeconfig := api.PluginKubeconfig(b, apiservertest.AgentToken)

	dualStack := ipv6Available()
	for _, mode := range []string{"nft", "legacy"} {
		if _, err := exec.LookPath("iptables-" + mode + "-restore"); err != nil {
			b.Logf("skipping %s: %v", mode, err)
			continue
		}
		b.Run(mode, func(b *testing.B) {
			cands := append([]*candidate{{name: "plexus-cni", path: plugin}}, baselines(b, nil)...)
			for _, c := range cands {
				c.logFile = filepath.Join(b.TempDir(), "plexus-cni.log")
			}
			round := 0
			for b.Loop() {
				for _, c := range cands {
					b.StopTimer()
					netns, err := testutils.NewNS()
					if err != nil {
						b.Fatal(err)
					}
					c.env = append(os.Environ(), "CNI_COMMAND=ADD", "CNI_CONTAINERID=bench-"+strconv.Itoa(round),
						"CNI_NETNS="+netns.Path(), "CNI_IFNAME=eth0", "CNI_PATH=/nonexistent",
						"CNI_ARGS=IgnoreUnknown=1;K8S_POD_NAMESPACE="+namespace+";K8S_POD_NAME="+name+";K8S_POD_UID="+string(created.UID))
					stdin := addStdin(b, kubeconfig, mode, c.logFile, netns.Path(), dualStack)
					b.StartTimer()
					c.run(b, stdin)
					b.StopTimer()
					if round == 0 {
						requireRules(b, netns, mode, dualStack)
					}
					_ = netns.Close()
					_ = testutils.UnmountNS(netns)
					b.StartTimer()
				}
				round++
			}
			for _, c := range cands {
				c.report(b)
			}
		})
	}
}

func addStdin(tb testing.TB, kubeconfig, mode, logFile, netns string, dualStack bool) []byte {
	tb.Helper()
	ips := []map[string]any{{"address": "10.244.0.5/24", "gateway": "10.244.0.1", "interface": 0}}
	if dualStack {
		ips = append(ips, map[string]any{"address": "fd00:10:244::5/64", "interface": 0})
	}
	conf := map[string]any{
		"cniVersion": "1.1.0", "name": "bench", "type": "plexus-cni",
		"kubeconfig": kubeconfig, "iptables_mode": mode, "log_file": logFile, "log_level": "debug",
		"prevResult": map[string]any{
			"cniVersion": "1.1.0",
			"interfaces": []map[string]any{{"name": "eth0", "sandbox": netns}},
			"ips":        ips,
		},
	}
	b, err := json.Marshal(conf)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// requireRules fails unless the namespace holds our hooks for each family,
// so the benchmark cannot time a plugin that decided to do nothing.
func requireRules(tb testing.TB, netns ns.NetNS, mode string, dualStack bool) {
	tb.Helper()
	saves := []string{"iptables-" + mode + "-save"}
	if dualStack {
		saves = append(saves, "ip6tables-"+mode+"-save")
	}
	for _, save := range saves {
		var out []byte
		err := netns.Do(func(ns.NetNS) error {
			var err error
			out, err = exec.Command(save, "-t", "nat").CombinedOutput()
			return err
		})
		if err != nil || !strings.Contains(string(out), "-j PLEXUS_OUTPUT") {
			tb.Fatalf("%s in the pod netns after ADD: %v\n%s", save, err, out)
		}
	}
}

func ipv6Available() bool {
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/all/disable_ipv6")
	return err == nil && strings.TrimSpace(string(b)) == "0"
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
