package plugin

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/plexus-mesh/plexus/cni-plugin/pluginreport"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
)

// listenReports is a real report socket standing in for the node agent.
func listenReports(t testing.TB) *pluginreport.Listener {
	t.Helper()
	l, err := pluginreport.Listen(filepath.Join(t.TempDir(), "reports.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// nextReport returns the next report, failing the test after a second.
func nextReport(t *testing.T, l *pluginreport.Listener) pluginreport.Report {
	t.Helper()
	l.SetDeadline(time.Now().Add(time.Second))
	r, err := l.Receive()
	if err != nil {
		t.Fatalf("no valid report received: %v", err)
	}
	return r
}

func TestCommandsReportToAgent(t *testing.T) {
	a := listenReports(t)
	extra := map[string]any{"report_socket": a.Path()}
	prev := fmt.Sprintf(prevResult100, "1.0.0", "")
	cases := []struct {
		name string
		objs []runtime.Object
		run  func(h *harness) error
		want pluginreport.Report // durations are checked apart
	}{
		{"meshed ADD", []runtime.Object{pod("app", "web", nil, withSidecar)},
			func(h *harness) error { return h.p.Add(cmdArgs(stdin(t, "1.0.0", extra, prev), "app", "web")) },
			pluginreport.Report{Command: "ADD", Outcome: "success"}},
		{"ADD of a pod without proxy", []runtime.Object{pod("app", "web", nil, nil)},
			func(h *harness) error { return h.p.Add(cmdArgs(stdin(t, "1.0.0", extra, prev), "app", "web")) },
			pluginreport.Report{Command: "ADD", Outcome: "skipped"}},
		{"ADD of a missing pod", nil,
			func(h *harness) error { return h.p.Add(cmdArgs(stdin(t, "1.0.0", extra, prev), "app", "web")) },
			pluginreport.Report{Command: "ADD", Outcome: "error", Code: ErrCodeAPI}},
		{"ADD with an invalid config", nil,
			func(h *harness) error {
				bad := map[string]any{"report_socket": a.Path(), "log_level": "loud"}
				return h.p.Add(cmdArgs(stdin(t, "1.0.0", bad, prev), "app", "web"))
			},
			pluginreport.Report{Command: "ADD", Outcome: "error", Code: 7}},
		{"DEL", nil,
			func(h *harness) error { return h.p.Del(cmdArgs(stdin(t, "1.0.0", extra, ""), "app", "web")) },
			pluginreport.Report{Command: "DEL", Outcome: "success"}},
		{"failed DEL", nil,
			func(h *harness) error {
				h.tables.rmErr = errors.New("iptables-restore failed")
				return h.p.Del(cmdArgs(stdin(t, "1.0.0", extra, ""), "app", "web"))
			},
			pluginreport.Report{Command: "DEL", Outcome: "error", Code: ErrCodeRules}},
		{"CHECK that finds rules on an unmeshed pod", []runtime.Object{pod("app", "web", nil, nil)},
			func(h *harness) error {
				h.tables.state = map[rules.Family]rules.State{rules.IPv4: {Hooks: []string{"-A PREROUTING -j PLEXUS_INBOUND"}}}
				return h.p.Check(cmdArgs(stdin(t, "1.0.0", extra, prev), "app", "web"))
			},
			pluginreport.Report{Command: "CHECK", Outcome: "error", Code: ErrCodeCheck}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, tc.objs...)
			err := tc.run(h)
			got := nextReport(t, a)
			if (err != nil) != (tc.want.Outcome == "error") {
				t.Fatalf("command returned %v, report says %+v", err, got)
			}
			if got.ElapsedMS <= 0 || got.ElapsedMS > 1000 {
				t.Errorf("elapsed_ms = %v", got.ElapsedMS)
			}
			if tc.want.Command == "ADD" && tc.want.Code == 0 && got.DecideMS <= 0 {
				t.Errorf("ADD that reached a decision reports decide_ms = %v", got.DecideMS)
			}
			got.ElapsedMS, got.DecideMS = 0, 0
			if got != tc.want {
				t.Fatalf("report %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestReportNeverDelaysAdd: with no agent, a stale socket or an agent that
// does not read, ADD still succeeds and returns at once.
func TestReportNeverDelaysAdd(t *testing.T) {
	prev := fmt.Sprintf(prevResult100, "1.0.0", "")
	stuck := listenReports(t) // never read
	for {
		err := pluginreport.Send(stuck.Path(), pluginreport.Report{Command: "DEL", Outcome: "success"})
		if errors.Is(err, pluginreport.ErrNoListener) {
			break // its queue is full
		} else if err != nil {
			t.Fatal(err)
		}
	}
	stale := filepath.Join(t.TempDir(), "stale.sock")
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: stale, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	c.Close() // leaves the file, like a killed agent
	for name, path := range map[string]string{
		"no socket":           filepath.Join(t.TempDir(), "none.sock"),
		"stale socket":        stale,
		"agent not reading":   stuck.Path(),
		"not a socket at all": t.TempDir(),
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, pod("app", "web", nil, withSidecar))
			args := cmdArgs(stdin(t, "1.0.0", map[string]any{"report_socket": path}, prev), "app", "web")
			done := make(chan error, 1)
			start := time.Now()
			go func() { done <- h.p.Add(args) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("ADD failed: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("ADD blocked on the report")
			}
			if h.out.String() != prev || len(h.tables.applied) != 1 {
				t.Fatalf("ADD did not apply rules and print prevResult")
			}
			t.Logf("ADD took %v", time.Since(start))
		})
	}
}

func TestReportFailureIsLoggedAtDebugOnly(t *testing.T) {
	prev := fmt.Sprintf(prevResult100, "1.0.0", "")
	missing := filepath.Join(t.TempDir(), "none.sock")
	for level, wantLine := range map[string]bool{"debug": true, "info": false} {
		logFile := filepath.Join(t.TempDir(), "plexus-cni.log")
		h := newHarness(t, pod("app", "web", nil, nil))
		h.p.NewLog = FileLogger
		conf := map[string]any{"report_socket": missing, "log_level": level, "log_file": logFile}
		if err := h.p.Add(cmdArgs(stdin(t, "1.0.0", conf, prev), "app", "web")); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(logFile)
		line := strings.Contains(string(b), "level=DEBUG msg=\"could not report to the node agent\"") && strings.Contains(string(b), missing)
		if line != wantLine {
			t.Errorf("log_level %s: report failure logged = %v, want %v:\n%s", level, line, wantLine, b)
		}
	}
}

// BenchmarkSendReport is what reporting adds to each command: reading
// report_socket from stdin again, encoding and sending the datagram.
func BenchmarkSendReport(b *testing.B) {
	a := listenReports(b)
	go func() {
		for {
			if _, err := a.Receive(); errors.Is(err, net.ErrClosed) {
				return
			}
		}
	}()
	data := []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"k8s-pod-network","type":"plexus-cni",`+
		`"kubeconfig":"/var/lib/plexus/plexus-cni.kubeconfig","log_level":"info","report_socket":%q,`+
		`"proxy":{"inbound_port":4143,"outbound_port":4140,"admin_port":4191,"uid":2102,"gid":2102},"prevResult":`+
		prevResult100+`}`, a.Path(), "1.0.0", `,{"address":"fd00:244::5/64","interface":0}`))
	p := &Plugin{}
	args := &skel.CmdArgs{StdinData: data}
	b.ReportAllocs()
	for b.Loop() {
		rep := newReport("ADD", args)
		rep.decidedAfter(true, time.Millisecond)
		p.sendReport(rep, nil)
	}
}
