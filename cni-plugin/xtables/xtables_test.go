package xtables

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/cni-plugin/rules"
)

func TestValidate(t *testing.T) {
	for _, m := range []Mode{"", Auto, Legacy, NFT} {
		if err := m.Validate(); err != nil {
			t.Errorf("mode %q: %v", m, err)
		}
	}
	if err := Mode("ebpf").Validate(); err == nil {
		t.Error(`mode "ebpf" accepted`)
	}
	good := Config{Family: rules.IPv4, Mode: Auto, LockWait: 5 * time.Second}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"family":    {Family: 5, LockWait: time.Second},
		"lock wait": {Family: rules.IPv6, LockWait: time.Millisecond},
		"mode":      {Family: rules.IPv4, Mode: "x", LockWait: time.Second},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("bad %s accepted: %+v", name, c)
		}
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, tc := range []struct {
		a, b, c int
		want    bool
	}{{1, 6, 2, true}, {1, 6, 1, false}, {1, 8, 0, true}, {1, 4, 21, false}, {2, 0, 0, true}, {0, 9, 9, false}} {
		if got := versionAtLeast(tc.a, tc.b, tc.c, 1, 6, 2); got != tc.want {
			t.Errorf("%d.%d.%d >= 1.6.2 = %v, want %v", tc.a, tc.b, tc.c, got, tc.want)
		}
	}
}

func TestDetectBackend(t *testing.T) {
	dir := t.TempDir()
	for target, want := range map[string]string{"xtables-nft-multi": "nft", "xtables-legacy-multi": "legacy", "other": "unknown"} {
		bin := filepath.Join(dir, target)
		if err := os.WriteFile(bin, nil, 0o755); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(dir, "iptables-restore-"+want)
		if err := os.Symlink(bin, link); err != nil {
			t.Fatal(err)
		}
		if got := detectBackend(link); got != want {
			t.Errorf("detectBackend(-> %s) = %s, want %s", target, got, want)
		}
	}
}

// TestDetectOnThisMachine runs the real detection where iptables exists.
func TestDetectOnThisMachine(t *testing.T) {
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("no iptables on this machine")
	}
	tools, err := Detect(Auto, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r, err := tools.For(rules.IPv4)
	if err != nil || r.RestorePath() == "" || r.Backend() == "" {
		t.Fatalf("IPv4 runner %+v, %v", r, err)
	}
	if err := r.CheckVersion(); err != nil {
		t.Fatal(err)
	}
	if _, err := Detect(Mode("nope"), 5*time.Second); err == nil {
		t.Fatal("invalid mode accepted")
	}
}

func TestChooseMode(t *testing.T) {
	nftRules := "*nat\n:PREROUTING ACCEPT [0:0]\n-A PREROUTING -j KUBE-SERVICES\n-A KUBE-SERVICES -j RETURN\nCOMMIT\n"
	legacyRules := "*filter\n-A INPUT -j ACCEPT\nCOMMIT\n"
	hint := "*mangle\n:" + KubeHint + " - [0:0]\nCOMMIT\n"
	for _, tc := range []struct {
		name, nft, legacy string
		want              Mode
	}{
		{"nothing anywhere", "", "", NFT},
		{"more nft rules", nftRules, legacyRules, NFT},
		{"more legacy rules", "", legacyRules, Legacy},
		{"tie", legacyRules, legacyRules, NFT},
		{"kubelet hint in legacy beats counts", nftRules, hint, Legacy},
		{"kubelet hint in nft", hint, legacyRules + legacyRules, NFT},
	} {
		got, reason := chooseMode(tc.nft, tc.legacy)
		if got != tc.want || reason == "" {
			t.Errorf("%s: chooseMode = %s (%s), want %s", tc.name, got, reason, tc.want)
		}
	}
}

func TestResolveKeepsExplicitModes(t *testing.T) {
	for _, m := range []Mode{Legacy, NFT} {
		if got, _, err := Resolve(t.Context(), m); err != nil || got != m {
			t.Errorf("Resolve(%s) = %s, %v", m, got, err)
		}
	}
	if _, _, err := Resolve(t.Context(), "ebpf"); err == nil {
		t.Error("Resolve(ebpf) succeeded")
	}
}

// TestResolveOnThisMachine resolves auto against this machine's rules.
func TestResolveOnThisMachine(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("iptables-save needs root")
	}
	if _, err := exec.LookPath("iptables-nft-save"); err != nil {
		t.Skip("no iptables-nft-save on this machine")
	}
	m, reason, err := Resolve(t.Context(), Auto)
	if err != nil || (m != NFT && m != Legacy) {
		t.Fatalf("Resolve(auto) = %s, %v", m, err)
	}
	t.Logf("auto resolves to %s: %s", m, reason)
}

// TestOldIptablesIsExplained puts an iptables 1.6.1 (shell scripts) first
// in PATH: finding it starts no process and succeeds, and the failing
// restore's error names the version and what is needed.
func TestOldIptablesIsExplained(t *testing.T) {
	dir := t.TempDir()
	for name, script := range map[string]string{
		"iptables":         "echo 'iptables v1.6.1'",
		"iptables-save":    "exit 0",
		"iptables-restore": "echo \"iptables-restore: unrecognized option '--wait'\" >&2; exit 2",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", dir)
	r, err := New(Config{Family: rules.IPv4, Mode: Auto, LockWait: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckVersion(); err == nil || !strings.Contains(err.Error(), "version 1.6.1") {
		t.Fatalf("CheckVersion: %v", err)
	}
	err = r.Restore(context.Background(), "*nat\nCOMMIT\n")
	for _, want := range []string{"unrecognized option '--wait'", "version 1.6.1", "at least 1.6.2"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Restore error %v lacks %q", err, want)
		}
	}
}
