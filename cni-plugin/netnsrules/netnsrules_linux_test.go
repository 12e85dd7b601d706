package netnsrules

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"

	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/cni-plugin/xtables"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

func rootNetns(t *testing.T) ns.NetNS {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, iptables)")
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		t.Skip("iptables is not installed")
	}
	n, err := testutils.NewNS()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Close(); _ = testutils.UnmountNS(n) })
	return n
}

func saveIn(t *testing.T, n ns.NetNS, bin string) string {
	t.Helper()
	var out []byte
	err := n.Do(func(ns.NetNS) error {
		var err error
		out, err = exec.Command(bin, "-t", "nat").CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("%s: %v %s", bin, err, out)
	}
	return string(out)
}

// TestApplyIsAllOrNothingAcrossFamilies breaks the IPv6 rule set so that
// its transaction fails, and checks that the IPv4 rules are rolled back.
func TestApplyIsAllOrNothingAcrossFamilies(t *testing.T) {
	n := rootNetns(t)
	tables := NewNetnsTables(xtables.Auto, 5*time.Second, slog.New(slog.DiscardHandler))
	v4, _ := rules.Build(podcontract.Defaults(), rules.IPv4)
	v6, _ := rules.Build(podcontract.Defaults(), rules.IPv6)
	v6.Rules = append(v6.Rules, rules.Rule{Chain: rules.ChainOutput, Match: []string{"-m", "no-such-match"}, Comment: "broken", Target: []string{"RETURN"}})

	err := tables.Apply(context.Background(), n.Path(), []rules.RuleSet{v4, v6})
	if err == nil || !strings.Contains(err.Error(), "IPv6") {
		t.Fatalf("Apply with a broken IPv6 set: %v", err)
	}
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		if out := saveIn(t, n, bin); strings.Contains(out, "PLEXUS") {
			t.Fatalf("%s after a failed apply still shows our rules:\n%s", bin, out)
		}
	}

	// A good apply, then Remove twice, then Remove on a vanished netns.
	v6, _ = rules.Build(podcontract.Defaults(), rules.IPv6)
	if err := tables.Apply(context.Background(), n.Path(), []rules.RuleSet{v4, v6}); err != nil {
		t.Fatal(err)
	}
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		if out := saveIn(t, n, bin); strings.Count(out, "plexus/") != len(v4.Rules)+len(v4.Hooks) {
			t.Fatalf("%s after apply:\n%s", bin, out)
		}
	}
	for i := 0; i < 2; i++ {
		if err := tables.Remove(context.Background(), n.Path()); err != nil {
			t.Fatalf("Remove #%d: %v", i+1, err)
		}
	}
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		if out := saveIn(t, n, bin); strings.Contains(out, "PLEXUS") {
			t.Fatalf("%s after Remove:\n%s", bin, out)
		}
	}
	err = tables.Remove(context.Background(), "/var/run/netns/plexus-no-such-netns")
	if !errors.Is(err, ErrNetnsGone) {
		t.Fatalf("Remove on a missing netns: %v, want ErrNetnsGone", err)
	}
}

// TestPrepareThenApplyOrRelease starts iptables-restore for both families
// before the rules are known: applied, the rules land (from the processes
// started early, says the debug log); released unfed, nothing changes.
// Without Prepare, or prepared for another namespace, Apply starts its own.
func TestPrepareThenApplyOrRelease(t *testing.T) {
	n := rootNetns(t)
	var logged strings.Builder
	log := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	v4, _ := rules.Build(podcontract.Defaults(), rules.IPv4)
	v6, _ := rules.Build(podcontract.Defaults(), rules.IPv6)
	fams := []rules.Family{rules.IPv4, rules.IPv6}

	released := NewNetnsTables(xtables.Auto, 5*time.Second, log)
	released.Prepare(n.Path(), fams)
	released.Release()
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		if out := saveIn(t, n, bin); strings.Contains(out, "PLEXUS") {
			t.Fatalf("%s after Prepare and Release:\n%s", bin, out)
		}
	}

	applied := NewNetnsTables(xtables.Auto, 5*time.Second, log)
	applied.Prepare(n.Path(), fams)
	if err := applied.Apply(context.Background(), n.Path(), []rules.RuleSet{v4, v6}); err != nil {
		t.Fatal(err)
	}
	applied.Release()
	for _, bin := range []string{"iptables-save", "ip6tables-save"} {
		if out := saveIn(t, n, bin); strings.Count(out, "plexus/") != len(v4.Rules)+len(v4.Hooks) {
			t.Fatalf("%s after Prepare and Apply:\n%s", bin, out)
		}
	}
	if !strings.Contains(logged.String(), "prepared=2") {
		t.Fatalf("the rule sets were not applied by the processes started early; log:\n%s", logged.String())
	}

	// Prepared for another namespace: Apply starts its own processes.
	logged.Reset()
	other := NewNetnsTables(xtables.Auto, 5*time.Second, log)
	other.Prepare("/var/run/netns/plexus-no-such-netns", fams)
	if err := other.Remove(context.Background(), n.Path()); err != nil {
		t.Fatal(err)
	}
	if err := other.Apply(context.Background(), n.Path(), []rules.RuleSet{v4}); err != nil {
		t.Fatal(err)
	}
	other.Release()
	if !strings.Contains(logged.String(), "prepared=0") {
		t.Fatalf("processes prepared for another namespace were used; log:\n%s", logged.String())
	}
}
