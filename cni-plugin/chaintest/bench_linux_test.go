package chaintest

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/plexus-mesh/plexus/cni-plugin/addlog"
)

// BenchmarkAdd measures CNI ADD for meshed pods: for each pod, ADD of the
// primary plugin alone (bridge + host-local, through libcni) and then ADD of
// plexus-cni alone with the primary's result as prevResult, which includes
// process start, the pod lookup, and the iptables transaction(s). Each
// iteration attaches PLEXUS_CNI_BENCH_PODS pods (default 100) and reports
// medians and p99s as custom metrics. Two lookups in one run: lookup=api
// reads each pod with a GET through the node-netns forwarder (no node
// agent, as in node-image mode without one); lookup=agent asks the node
// agent's pod socket first, served by the agent's own handler over an
// informer (daemonset/podlookup), as on a node running the DaemonSet.
func BenchmarkAdd(b *testing.B) {
	b.Run("lookup=api", func(b *testing.B) { benchAdd(b, false) })
	b.Run("lookup=agent", func(b *testing.B) { benchAdd(b, true) })
}

func benchAdd(b *testing.B, agent bool) {
	e := newEnv(b, nil)
	pods := 100
	if v := os.Getenv("PLEXUS_CNI_BENCH_PODS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("PLEXUS_CNI_BENCH_PODS=%q", v)
		}
		pods = n
	}
	var lookups *agentLookups
	if agent {
		lookups = e.serveAgentLookups(b)
	}
	pluginPath := filepath.Join(pluginDir, "plexus-cni")
	var primary, ours, primaryCPU, oursCPU []time.Duration
	round := 0
	for b.Loop() {
		round++
		b.StopTimer()
		names := make([]string, pods)
		for i := range names {
			names[i] = fmt.Sprintf("bench-%d-%d", round, i)
			e.createPod(names[i], true, nil)
		}
		if lookups != nil {
			lookups.waitFor(b, names)
		}
		b.StartTimer()
		for i, name := range names {
			m := e.benchOne(b, pluginPath, name, i == 0)
			primary = append(primary, m.primary)
			ours = append(ours, m.ours)
			primaryCPU = append(primaryCPU, m.primaryCPU)
			oursCPU = append(oursCPU, m.oursCPU)
		}
	}
	if lookups != nil {
		if hits := lookups.hits(); hits != float64(len(ours)) {
			b.Fatalf("the node agent answered %v of %d lookups; the benchmark would not measure the agent path", hits, len(ours))
		}
	}
	p50p, p99p := percentile(primary, 50), percentile(primary, 99)
	p50o, p99o := percentile(ours, 50), percentile(ours, 99)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(p50p), "primary-p50-ms")
	b.ReportMetric(ms(p99p), "primary-p99-ms")
	b.ReportMetric(ms(p50o), "plexus-p50-ms")
	b.ReportMetric(ms(p99o), "plexus-p99-ms")
	b.ReportMetric(ms(percentile(primaryCPU, 50)), "primary-cpu-p50-ms")
	b.ReportMetric(ms(percentile(oursCPU, 50)), "plexus-cpu-p50-ms")
	b.ReportMetric(float64(len(ours)), "pods")
	inDecide, inTotal, err := addlog.Times(e.logFile)
	if err != nil {
		b.Fatal(err)
	}
	if os.Getenv("PLEXUS_CNI_BENCH_SHOWLOG") != "" {
		data, _ := os.ReadFile(e.logFile)
		b.Logf("plexus-cni log:\n%s", data)
	}
	b.ReportMetric(percentile(inTotal, 50).Seconds()*1000, "plexus-inproc-p50-ms")
	b.Logf("plexus-cni in-process (from its log, without process start): decide (pod GET) p50 %.1f ms, whole ADD p50 %.1f ms p99 %.1f ms",
		ms(percentile(inDecide, 50)), ms(percentile(inTotal, 50)), ms(percentile(inTotal, 99)))
	b.Logf("CPU time (user+sys of the plugin processes and their children; less sensitive to contention than wall time, but not immune on a shared VM): primary p50 %.1f ms, plexus-cni p50 %.1f ms",
		ms(percentile(primaryCPU, 50)), ms(percentile(oursCPU, 50)))
	b.Logf("ADD over %d meshed pods: primary (bridge+host-local) p50 %.1f ms p99 %.1f ms; plexus-cni p50 %.1f ms p99 %.1f ms (target p50 <= 30 ms); ratio p50 %.2f",
		len(ours), ms(p50p), ms(p99p), ms(p50o), ms(p99o), ms(p50o)/ms(p50p))
}

// addTimes are one pod's measurements.
type addTimes struct {
	primary, ours       time.Duration // wall clock
	primaryCPU, oursCPU time.Duration // user+sys of the exec'd processes
}

// childCPU is the CPU time of all waited-for child processes so far.
func childCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchOne attaches one pod and returns the primary's and plexus-cni's ADD
// times; the pod is detached again (untimed).
func (e *env) benchOne(b *testing.B, pluginPath, name string, verify bool) addTimes {
	b.StopTimer()
	p := &pod{name: name, ns: newNS(b)}
	p.rt = e.rt(p.ns, name)
	ctx := context.Background()
	loRT := *p.rt
	loRT.IfName = "lo"
	if err := e.inNode(func() error { _, err := e.cni.AddNetwork(ctx, e.lo, &loRT); return err }); err != nil {
		b.Fatalf("loopback ADD: %v", err)
	}
	b.StartTimer()

	var res types.Result
	cpu0 := childCPU(b)
	start := time.Now()
	err := e.inNode(func() error {
		var err error
		res, err = e.cni.AddNetworkList(ctx, e.primary, p.rt)
		return err
	})
	dPrimary := time.Since(start)
	cpu1 := childCPU(b)
	if err != nil {
		b.Fatalf("primary ADD: %v", err)
	}

	b.StopTimer()
	p.res = res
	dOurs, err := e.plexusOnly(p, "ADD", func() { b.StartTimer() })
	cpu2 := childCPU(b)

	b.StopTimer()
	if err != nil {
		b.Fatalf("plexus-cni ADD: %v", err)
	}
	if verify && !strings.Contains(natSave(b, p.ns, false), "-j PLEXUS_OUTPUT") {
		b.Fatal("benchmark pod got no redirect rules; the benchmark would not measure the meshed path")
	}
	if err := e.inNode(func() error { return e.cni.DelNetworkList(ctx, e.chain, p.rt) }); err != nil {
		b.Fatalf("DEL: %v", err)
	}
	_ = p.ns.Close()
	_ = unmount(p.ns)
	b.StartTimer()
	return addTimes{primary: dPrimary, ours: dOurs, primaryCPU: cpu1 - cpu0, oursCPU: cpu2 - cpu1}
}

// plexusOnly runs plexus-cni alone for p with p.res as prevResult, as the
// chain would, and times the call; started runs just before it.
func (e *env) plexusOnly(p *pod, command string, started func()) (time.Duration, error) {
	conf, err := e.plexusConfWithPrev(p.res)
	if err != nil {
		return 0, err
	}
	args := &invoke.Args{
		Command: command, ContainerID: p.rt.ContainerID, NetNS: p.rt.NetNS, IfName: p.rt.IfName,
		PluginArgs: p.rt.Args, Path: pluginDir,
	}
	pluginPath := filepath.Join(pluginDir, "plexus-cni")
	started()
	start := time.Now()
	err = e.inNode(func() error {
		_, err := invoke.ExecPluginWithResult(context.Background(), pluginPath, conf, args, nil)
		return err
	})
	return time.Since(start), err
}

// plexusConfWithPrev is plexus-cni's stdin as libcni would build it.
func (e *env) plexusConfWithPrev(prev types.Result) ([]byte, error) {
	r, err := prev.GetAsVersion(e.chain.CNIVersion)
	if err != nil {
		return nil, err
	}
	rb, err := json.Marshal(r.(*current.Result))
	if err != nil {
		return nil, err
	}
	var conf map[string]any
	if err := json.Unmarshal(e.plexus, &conf); err != nil {
		return nil, err
	}
	conf["cniVersion"] = e.chain.CNIVersion
	conf["name"] = e.chain.Name
	conf["prevResult"] = json.RawMessage(rb)
	return json.Marshal(conf)
}

func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(i, 0)]
}
