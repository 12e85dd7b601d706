package localcluster

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestClusterConfigsGolden: the files integration/cluster/lib.sh writes
// for node 1 (kubeconfigs, the bridge and flannel conflists, containerd's,
// the kubelet's and kube-proxy's configs) are byte for byte the golden
// ones, the temporary state directory written as @STATE@: cluster a's,
// and the second cluster b's (env.sh, multicluster/HARNESS.md), whose
// addresses, names and API server differ. A change to the cluster scripts
// for one must leave the other as it is; go test -update rewrites them
// when a change is meant.
func TestClusterConfigsGolden(t *testing.T) {
	for name, golden := range map[string]string{"a": "cluster-configs.golden", "b": "cluster-configs-b.golden"} {
		t.Run(name, func(t *testing.T) { checkClusterConfigs(t, name, golden) })
	}
}

func checkClusterConfigs(t *testing.T, name, golden string) {
	dir := t.TempDir()
	state := filepath.Join(dir, "state")
	script := `set -euo pipefail
unset NODE_NAME PLEXUS_CLUSTER_CNI
source ../cluster/env.sh
source ../cluster/lib.sh
mkdir -p "$STATE_DIR" "$CNI_BIN_DIR" "$CNI_CONF_DIR" "$CNI_REF_BIN" "$FLANNEL_BIN"
for p in bridge host-local loopback portmap; do echo "$p" >"$CNI_REF_BIN/$p"; done
echo flannel >"$FLANNEL_BIN/flannel"
write_kubeconfigs
CLUSTER_CNI=bridge write_cni_config
CLUSTER_CNI=flannel write_cni_config
write_containerd_config
write_kubelet_config
write_kube_proxy_config
`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "PLEXUS_CLUSTER_NAME="+name, "PLEXUS_CACHE_DIR="+filepath.Join(dir, "cache"))
	if name == "a" {
		cmd.Env = append(cmd.Env, "STATE_DIR="+state)
	} else {
		cmd.Env = append(cmd.Env, "PLEXUS_CLUSTER_B_STATE_DIR="+state)
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("writing the configs: %v\n%s", err, out)
	}
	var files []string
	err := filepath.WalkDir(state, func(path string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && !strings.HasPrefix(path, filepath.Join(state, "cni", "bin")) {
			files = append(files, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	var got strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got.WriteString("== " + strings.TrimPrefix(f, state) + " ==\n")
		got.WriteString(strings.ReplaceAll(string(b), state, "@STATE@"))
	}
	golden = filepath.Join("testdata", golden)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != string(want) {
		t.Errorf("the cluster's configs differ from %s (go test -update rewrites it when the change is meant):\n%s", golden, got.String())
	}
}
