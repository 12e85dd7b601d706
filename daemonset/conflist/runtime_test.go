package conflist

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// The test binary doubles as every CNI plugin of the chain: TestMain acts
// as a plugin when libcni runs it with CNI_COMMAND set, logging its type
// and whether it got a prevResult, and passing the result along.
const fakeLogEnv = "PLEXUS_FAKE_CNI_LOG"

func TestMain(m *testing.M) {
	if cmd := os.Getenv("CNI_COMMAND"); cmd != "" {
		os.Exit(fakePlugin(cmd))
	}
	os.Exit(m.Run())
}

func fakePlugin(cmd string) int {
	in, err := io.ReadAll(os.Stdin)
	if err != nil {
		return 1
	}
	var conf struct {
		Type       string          `json:"type"`
		CNIVersion string          `json:"cniVersion"`
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(in, &conf); err != nil {
		fmt.Fprintf(os.Stdout, `{"code":100,"msg":%q}`, err.Error())
		return 1
	}
	f, err := os.OpenFile(os.Getenv(fakeLogEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return 1
	}
	fmt.Fprintf(f, "%s %s prev=%v\n", cmd, conf.Type, len(conf.PrevResult) > 0)
	f.Close()
	if cmd != "ADD" {
		return 0
	}
	if len(conf.PrevResult) > 0 {
		os.Stdout.Write(conf.PrevResult)
		return 0
	}
	fmt.Fprintf(os.Stdout, `{"cniVersion":%q,"dns":{}}`, conf.CNIVersion)
	return 0
}

// TestRuntimeRunsPatchedChain has libcni, the library containerd and CRI-O
// use, load each patched config and run ADD: every plugin of the original
// chain runs, in order, then plexus-cni, with the chain's prevResult.
func TestRuntimeRunsPatchedChain(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		in    string
		chain []string
	}{
		{"bridge.conf", []string{"bridge"}},
		{"calico.conflist", []string{"calico", "portmap", "bandwidth"}},
		{"cilium.conflist", []string{"cilium-cni"}},
		{"flannel.conflist", []string{"flannel", "portmap"}},
		{"older-plexus.conflist", []string{"bridge", "portmap"}},
	} {
		t.Run(tc.in, func(t *testing.T) {
			p, _, _ := setup(t, tc.in, 0o644)
			if _, err := p.Patch(); err != nil {
				t.Fatal(err)
			}
			bin := t.TempDir()
			for _, name := range append(tc.chain, PluginType) {
				if err := os.Symlink(self, filepath.Join(bin, name)); err != nil {
					t.Fatal(err)
				}
			}
			logPath := filepath.Join(t.TempDir(), "calls")
			t.Setenv(fakeLogEnv, logPath)

			path, err := Primary(p.ConfDir)
			if err != nil {
				t.Fatal(err)
			}
			list, err := libcni.ConfListFromFile(path)
			if err != nil {
				t.Fatal(err)
			}
			cni := libcni.NewCNIConfigWithCacheDir([]string{bin}, t.TempDir(), nil)
			rt := &libcni.RuntimeConf{ContainerID: "c1", NetNS: "/var/run/netns/fake", IfName: "eth0"}
			if _, err := cni.AddNetworkList(context.Background(), list, rt); err != nil {
				t.Fatalf("ADD: %v", err)
			}
			b, err := os.ReadFile(logPath)
			if err != nil {
				t.Fatal(err)
			}
			var want []string
			for i, typ := range append(tc.chain, PluginType) {
				want = append(want, fmt.Sprintf("ADD %s prev=%v", typ, i > 0))
			}
			if got := strings.Split(strings.TrimSpace(string(b)), "\n"); strings.Join(got, "|") != strings.Join(want, "|") {
				t.Fatalf("calls:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
		})
	}
}
