package meshbench

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestRunSmoke runs the whole benchmark briefly and checks that every path
// carried every request and that the proxies, not a shortcut, carried them.
func TestRunSmoke(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, iptables)")
	}
	bin := os.Getenv("PLEXUS_PROXY_BIN")
	if bin == "" {
		t.Skip("PLEXUS_PROXY_BIN is not set (make test sets it to bin/plexus-proxy)")
	}
	if _, err := exec.LookPath("nginx"); err != nil {
		t.Skip("nginx is not installed (make deps-bench)")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	rep, err := Run(context.Background(), Config{
		ProxyBin: bin, Rates: []int{200}, Duration: time.Second,
		SaturateFor: 500 * time.Millisecond, Workers: 4, LogDir: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rates) != 3 {
		t.Fatalf("want 3 results (direct, plexus, nginx), got %+v", rep.Rates)
	}
	for _, r := range rep.Rates {
		if r.Errors != 0 || r.Latency.Count != 200 {
			t.Errorf("%s: %d ok, %d errors (%v), want 200 ok", r.Path, r.Latency.Count, r.Errors, r.FirstErr)
		}
		if proxied := r.Path != "direct"; proxied != (r.SidecarCPU > 0) {
			t.Errorf("%s: sidecar CPU %.3f: traffic did not take the expected path", r.Path, r.SidecarCPU)
		}
	}
	for _, m := range rep.Memory {
		if len(m.Plexus) != 2 || m.Plexus[0].RSS == 0 || len(m.Peer) != 2 || m.Peer[0].RSS == 0 {
			t.Errorf("memory row %q incomplete: %+v", m.When, m)
		}
	}
	for _, n := range []string{"meshbench-c-", "meshbench-s-"} {
		if _, err := os.Stat("/run/netns/" + n + itoa(os.Getpid())); !os.IsNotExist(err) {
			t.Errorf("namespace %s%d left behind", n, os.Getpid())
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
