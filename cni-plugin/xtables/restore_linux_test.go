package xtables

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

func requireRootAnd(tb testing.TB, mode Mode) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root (network namespaces, iptables)")
	}
	if _, err := exec.LookPath("iptables-" + string(mode) + "-restore"); err != nil {
		tb.Skipf("no %s backend: %v", mode, err)
	}
}

// BenchmarkRestore times one create-only iptables-restore of the default
// rule set in a fresh network namespace (the namespace is made outside the
// timer), per backend and family: what ADD pays per family.
func BenchmarkRestore(b *testing.B) {
	for _, mode := range []Mode{NFT, Legacy} {
		for _, fam := range []rules.Family{rules.IPv4, rules.IPv6} {
			b.Run(fmt.Sprintf("%s/%s", mode, fam), func(b *testing.B) {
				requireRootAnd(b, mode)
				tools, err := Detect(mode, 5*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				r, err := tools.For(fam)
				if err != nil {
					b.Skip(err)
				}
				rs, err := rules.Build(podcontract.Defaults(), fam)
				if err != nil {
					b.Fatal(err)
				}
				script := rules.RenderCreate(rs)
				for b.Loop() {
					b.StopTimer()
					n, err := testutils.NewNS()
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
					err = n.Do(func(ns.NetNS) error { return r.Restore(context.Background(), script) })
					b.StopTimer()
					_ = n.Close()
					_ = testutils.UnmountNS(n)
					if err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
	}
}

// BenchmarkDetect times finding the IPv4 and IPv6 binaries of a backend.
func BenchmarkDetect(b *testing.B) {
	for _, mode := range []Mode{Auto, NFT, Legacy} {
		b.Run(string(mode), func(b *testing.B) {
			if _, err := exec.LookPath("iptables"); err != nil {
				b.Skip("no iptables")
			}
			for b.Loop() {
				if _, err := Detect(mode, 5*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestPendingRestore starts iptables-restore in a fresh namespace before
// its input: unfed it holds no xtables lock, cancelled it changes nothing,
// fed it applies the script.
func TestPendingRestore(t *testing.T) {
	for _, mode := range []Mode{NFT, Legacy} {
		t.Run(string(mode), func(t *testing.T) {
			requireRootAnd(t, mode)
			tools, err := Detect(mode, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			r, _ := tools.For(rules.IPv4)
			rs, err := rules.Build(podcontract.Defaults(), rules.IPv4)
			if err != nil {
				t.Fatal(err)
			}
			n, err := testutils.NewNS()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = n.Close(); _ = testutils.UnmountNS(n) })
			start := func() *Pending {
				var p *Pending
				if err := n.Do(func(ns.NetNS) error { p, err = r.StartRestore(); return err }); err != nil {
					t.Fatal(err)
				}
				return p
			}
			save := func() string {
				var out string
				if err := n.Do(func(ns.NetNS) error { out, err = r.Save(context.Background()); return err }); err != nil {
					t.Fatal(err)
				}
				return out
			}

			cancelled := start()
			fed := start()
			eventually.Within(t, 5*time.Second, "both restores blocked reading their input", func() bool {
				return readingInput(cancelled) && readingInput(fed)
			})
			if mode == Legacy {
				requireLockFree(t)
			}
			cancelled.Cancel()
			if s := save(); strings.Contains(s, rules.ChainOutput) {
				t.Fatalf("a cancelled restore changed the table:\n%s", s)
			}
			if err := cancelled.Restore(context.Background(), rules.RenderCreate(rs)); err == nil {
				t.Fatal("a cancelled restore accepted input")
			}
			if err := fed.Restore(context.Background(), rules.RenderCreate(rs)); err != nil {
				t.Fatal(err)
			}
			if s := save(); !strings.Contains(s, "-j "+rules.ChainOutput) {
				t.Fatalf("the fed restore did not apply:\n%s", s)
			}
			fed.Cancel() // no-op after Restore
		})
	}
}

// readingInput reports whether p's process is blocked reading its input:
// its /proc/PID/syscall names read(2) on descriptor 0.
func readingInput(p *Pending) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", p.cmd.Process.Pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) >= 2 && f[0] == strconv.Itoa(syscall.SYS_READ) && f[1] == "0x0"
}

// requireLockFree fails if anyone holds the xtables lock.
func requireLockFree(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile("/run/xtables.lock", os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatalf("the xtables lock is held while iptables-restore waits for input: %v", err)
	}
	_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// BenchmarkCheckVersion times go-iptables' detection (one `iptables
// --version`), which ADD no longer runs.
func BenchmarkCheckVersion(b *testing.B) {
	r, err := New(Config{Family: rules.IPv4, Mode: Auto, LockWait: 5 * time.Second})
	if err != nil {
		b.Skip(err)
	}
	for b.Loop() {
		if err := r.CheckVersion(); err != nil {
			b.Fatal(err)
		}
	}
}
