package chaintest

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

func TestVersionAndStatus(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	info, err := e.cni.GetVersionInfo(ctx, "plexus-cni")
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		if !slices.Contains(info.SupportedVersions(), v) {
			t.Errorf("VERSION lacks %s: %v", v, info.SupportedVersions())
		}
	}
	if err := e.cni.GetStatusNetworkList(ctx, e.chain); err != nil {
		t.Fatalf("STATUS with a working config: %v", err)
	}
	missing := filepath.Join(t.TempDir(), "no-kubeconfig")
	broken := rebuildChain(t, e, "1.1.0", map[string]any{"kubeconfig": missing})
	err = e.cni.GetStatusNetworkList(ctx, broken)
	if err == nil || !strings.Contains(err.Error(), missing) {
		t.Fatalf("STATUS with a missing kubeconfig: %v", err)
	}
}

// rebuildChain is e's chain in spec version v with the plexus-cni entry
// changed.
func rebuildChain(t *testing.T, e *env, v string, change map[string]any) *libcni.NetworkConfigList {
	t.Helper()
	var plugins []map[string]any
	for _, p := range e.chain.Plugins {
		var m map[string]any
		if err := json.Unmarshal(p.Bytes, &m); err != nil {
			t.Fatal(err)
		}
		if m["type"] == "plexus-cni" {
			for k, val := range change {
				m[k] = val
			}
		}
		delete(m, "cniVersion")
		delete(m, "name")
		plugins = append(plugins, m)
	}
	return confList(t, v, e.chain.Name, plugins...)
}

// TestSpecVersions runs ADD, CHECK and DEL through the chain in each
// supported spec version (CHECK from 0.4.0, where the spec added it).
func TestSpecVersions(t *testing.T) {
	for _, v := range []string{"0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run(v, func(t *testing.T) {
			e := newEnv(t, nil)
			list := rebuildChain(t, e, v, nil)
			e.chain = list
			e.createPod("web", true, nil)
			p := e.mustAddPod("web", list)
			if p.res.Version() != v {
				t.Errorf("result version %s, want %s", p.res.Version(), v)
			}
			if !strings.Contains(natSave(t, p.ns, false), "-j PLEXUS_OUTPUT") {
				t.Fatal("no rules after ADD")
			}
			if ok, _ := version.GreaterThanOrEqualTo(v, "0.4.0"); ok {
				if err := e.check(p); err != nil {
					t.Fatalf("CHECK: %v", err)
				}
			}
			if err := e.del(p); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			noPlexusRules(t, p, e.dualStack)
		})
	}
}

// TestLegacyBackend applies, checks and removes the rules with
// iptables_mode "legacy" where the legacy tools exist.
func TestLegacyBackend(t *testing.T) {
	if _, err := exec.LookPath("iptables-legacy-restore"); err != nil {
		t.Skip("iptables-legacy is not installed")
	}
	e := newEnv(t, map[string]any{"iptables_mode": "legacy"})
	e.createPod("web", true, map[string]string{podcontract.AnnotationSkipOutboundPorts: "443"})
	p := e.mustAddPod("web", e.chain)
	var out []byte
	if err := p.ns.Do(func(ns.NetNS) error {
		var err error
		out, err = exec.Command("iptables-legacy-save", "-t", "nat").CombinedOutput()
		return err
	}); err != nil {
		t.Fatalf("iptables-legacy-save: %v %s", err, out)
	}
	if !strings.Contains(string(out), "--dport 443 -m comment --comment \"plexus/skip-outbound-ports\"") ||
		!strings.Contains(string(out), "! -d 127.0.0.0/8 -o lo -m owner --uid-owner 2102 -m comment --comment \"plexus/self-call\" -j PLEXUS_INBOUND") {
		t.Fatalf("legacy tables lack our rules:\n%s", out)
	}
	if err := e.check(p); err != nil {
		t.Fatalf("CHECK (legacy): %v", err)
	}
	if err := e.del(p); err != nil {
		t.Fatalf("DEL (legacy): %v", err)
	}
}
