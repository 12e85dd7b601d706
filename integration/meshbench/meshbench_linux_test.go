package meshbench

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
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
	for _, peer := range peers {
		if _, err := exec.LookPath(peer); err != nil {
			t.Skipf("%s is not installed (make deps-bench)", peer)
		}
	}
	// The proxies run as their own UID and read their tokens from dir.
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	os.Chmod(filepath.Dir(dir), 0o755)
	rep, err := Run(context.Background(), Config{
		ProxyBin: bin, Rates: []int{200}, Duration: time.Second,
		SaturateFor: 500 * time.Millisecond, Workers: 4, LogDir: dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	// direct and five pairs over HTTP/1.1; direct, plexus-mtls and the
	// two peers' HTTP/2 pairs over h2c, gRPC unary and gRPC streaming.
	if len(rep.Rates) != 18 {
		t.Fatalf("want 18 results, got %d: %+v", len(rep.Rates), rep.Rates)
	}
	for _, r := range rep.Rates {
		if r.Errors != 0 || r.Latency.Count != 200 {
			t.Errorf("%s %s: %d ok, %d errors (%v), want 200 ok", r.Path, r.Proto, r.Latency.Count, r.Errors, r.FirstErr)
		}
		if proxied := r.Path != "direct"; proxied != (r.SidecarCPU > 0) {
			t.Errorf("%s %s: sidecar CPU %.3f: traffic did not take the expected path", r.Path, r.Proto, r.SidecarCPU)
		}
	}
	for _, tp := range rep.Throughput {
		if tp.RPS <= 0 || tp.Errors != 0 {
			t.Errorf("%s %s at saturation: %.0f req/s, %d errors (%v)", tp.Path, tp.Proto, tp.RPS, tp.Errors, tp.FirstErr)
		}
	}
	for _, m := range rep.Memory {
		if len(m.Pairs) != 7 {
			t.Errorf("memory row %q has %d pairs, want 7", m.When, len(m.Pairs))
		}
		for _, p := range m.Pairs {
			if len(p.Sides) != 2 || p.Sides[0].RSS == 0 || p.Sides[1].RSS == 0 {
				t.Errorf("memory row %q: %s incomplete: %+v", m.When, p.Name, p.Sides)
			}
		}
	}
	for _, n := range []string{"meshbench-c-", "meshbench-s-"} {
		if _, err := os.Stat("/run/netns/" + n + itoa(os.Getpid())); !os.IsNotExist(err) {
			t.Errorf("namespace %s%d left behind", n, os.Getpid())
		}
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
