package xtables

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/plexus-mesh/plexus/cni-plugin/podconfig"
	"github.com/plexus-mesh/plexus/cni-plugin/rules"
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
				rs, err := rules.Build(podconfig.Defaults(), fam)
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
