package pluginmetrics

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
	"github.com/plexus-mesh/plexus/cni-plugin/plugin"
	"github.com/plexus-mesh/plexus/cni-plugin/pluginreport"
	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// serve runs Serve on a fresh socket and registry until the test ends.
func serve(t *testing.T) (path string, m *Metrics, reg *prometheus.Registry) {
	t.Helper()
	reg = prometheus.NewRegistry()
	m = NewMetrics(reg)
	path = filepath.Join(t.TempDir(), "reports.sock")
	l, err := pluginreport.Listen(path)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, m, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			t.Errorf("socket file left after Serve ended: %v", err)
		}
	})
	return path, m, reg
}

func sendRaw(t *testing.T, path string, b []byte) {
	t.Helper()
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func waitCount(t *testing.T, what string, c prometheus.Collector, want float64) {
	t.Helper()
	if eventually.Holds(2*time.Second, func() bool { return testutil.ToFloat64(c) == want }) {
		return
	}
	t.Fatalf("%s = %v, want %v", what, testutil.ToFloat64(c), want)
}

func TestServeCountsGoodGarbageAndOversized(t *testing.T) {
	path, m, reg := serve(t)
	for _, r := range []pluginreport.Report{
		{Command: "ADD", Outcome: "success", ElapsedMS: 25, DecideMS: 15},
		{Command: "ADD", Outcome: "success", ElapsedMS: 4, DecideMS: 1},
		{Command: "ADD", Outcome: "skipped", ElapsedMS: 12, DecideMS: 11},
		{Command: "DEL", Outcome: "error", Code: 102, ElapsedMS: 8},
	} {
		if err := pluginreport.Send(path, r); err != nil {
			t.Fatal(err)
		}
	}
	sendRaw(t, path, []byte("GET / HTTP/1.1\r\n\r\n"))
	sendRaw(t, path, []byte(`{"command":"ADD","outcome":"success","elapsed_ms":1,"x":"`+strings.Repeat("y", 10000)+`"}`))
	sendRaw(t, path, []byte(`{"command":"ADD","outcome":"success","elapsed_ms":-5}`))
	sendRaw(t, path, nil)
	waitCount(t, "invalid reports", m.Invalid, 4)
	waitCount(t, "DEL errors", m.Commands.WithLabelValues("DEL", "error"), 1)

	text := `
# HELP plexus_node_plugin_commands_total CNI commands plexus-cni reported, by command (ADD, DEL, CHECK) and outcome (success, skipped: ADD of a pod that is not meshed, error).
# TYPE plexus_node_plugin_commands_total counter
plexus_node_plugin_commands_total{command="ADD",outcome="skipped"} 1
plexus_node_plugin_commands_total{command="ADD",outcome="success"} 2
plexus_node_plugin_commands_total{command="DEL",outcome="error"} 1
# HELP plexus_node_plugin_errors_total Failed CNI commands plexus-cni reported, by command and CNI error code (cni-plugin/README.md lists them).
# TYPE plexus_node_plugin_errors_total counter
plexus_node_plugin_errors_total{code="102",command="DEL"} 1
# HELP plexus_node_plugin_reports_invalid_total Datagrams on the report socket that were not a valid report (garbage, oversized, unknown values).
# TYPE plexus_node_plugin_reports_invalid_total counter
plexus_node_plugin_reports_invalid_total 4
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(text),
		"plexus_node_plugin_commands_total", "plexus_node_plugin_errors_total", "plexus_node_plugin_reports_invalid_total"); err != nil {
		t.Error(err)
	}
	// ADD took 25, 4 and 12 ms: cumulative bucket counts.
	want := map[float64]uint64{0.001: 0, 0.0025: 0, 0.005: 1, 0.01: 1, 0.02: 2, 0.03: 3, 10: 3}
	got := addBuckets(t, reg)
	for le, n := range want {
		if got[le] != n {
			t.Errorf("ADD durations up to %vs: %d, want %d (all: %v)", le, got[le], n, got)
		}
	}
	if n := testutil.CollectAndCount(m.Decide); n != 1 {
		t.Errorf("decide histogram has %d series, want ADD only", n)
	}
}

// addBuckets returns the ADD duration histogram's cumulative counts by
// upper bound.
func addBuckets(t *testing.T, reg *prometheus.Registry) map[float64]uint64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[float64]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "plexus_node_plugin_duration_seconds" {
			continue
		}
		for _, metric := range mf.GetMetric() {
			if metric.GetLabel()[0].GetValue() == "ADD" {
				for _, b := range metric.GetHistogram().GetBucket() {
					out[b.GetUpperBound()] = b.GetCumulativeCount()
				}
			}
		}
	}
	return out
}

// TestPluginToAgent runs the plugin's real ADD and DEL against the agent's
// real socket: what the plugin reports arrives in the metrics.
func TestPluginToAgent(t *testing.T) {
	path, m, _ := serve(t)
	p := &plugin.Plugin{
		Stdout: io.Discard,
		Retry:  podrules.DefaultRetry(),
		Tables: func(*netconf.NetConf, *slog.Logger) plugin.Tables { return noTables{} },
		Pods: func(*netconf.NetConf) (podrules.PodGetter, error) {
			t.Error("the pod was looked up")
			return nil, nil
		},
	}
	conf := `{"cniVersion":"1.0.0","name":"n","type":"plexus-cni","kubeconfig":"/k","report_socket":"` + path + `",` +
		`"prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.244.0.5/24"}]}}`
	// Not a Kubernetes pod: decided without the API, skipped.
	if err := p.Add(&skel.CmdArgs{ContainerID: "c1", Netns: "/x", IfName: "eth0", StdinData: []byte(conf)}); err != nil {
		t.Fatal(err)
	}
	if err := p.Del(&skel.CmdArgs{ContainerID: "c1", IfName: "eth0", StdinData: []byte(conf)}); err != nil {
		t.Fatal(err)
	}
	// No prevResult: ADD fails with CNI code 7.
	bad := `{"cniVersion":"1.0.0","name":"n","type":"plexus-cni","kubeconfig":"/k","report_socket":"` + path + `"}`
	if err := p.Add(&skel.CmdArgs{ContainerID: "c2", Netns: "/x", IfName: "eth0", StdinData: []byte(bad)}); err == nil {
		t.Fatal("ADD without prevResult succeeded")
	}
	waitCount(t, "ADD skipped", m.Commands.WithLabelValues("ADD", "skipped"), 1)
	waitCount(t, "DEL success", m.Commands.WithLabelValues("DEL", "success"), 1)
	waitCount(t, "ADD errors with code 7", m.Errors.WithLabelValues("ADD", "7"), 1)
	if n := testutil.CollectAndCount(m.Duration); n != 2 {
		t.Errorf("duration histogram has %d series, want ADD and DEL", n)
	}
	if v := testutil.ToFloat64(m.Invalid); v != 0 {
		t.Errorf("the plugin sent %v invalid reports", v)
	}
}

// noTables is a network namespace nothing is ever written to.
type noTables struct{}

func (noTables) Apply(context.Context, string, []rules.RuleSet) error { return nil }
func (noTables) Remove(context.Context, string) error                 { return nil }
func (noTables) Current(context.Context, string, []rules.Family) (map[rules.Family]rules.State, error) {
	return nil, nil
}
