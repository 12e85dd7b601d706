package cniplugin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// clusterCNI says where the local cluster keeps its CNI files; test.sh sets
// these from integration/cluster/env.sh.
type clusterCNI struct {
	confDir, binDir, plugin, kubeconfig string
}

func readClusterCNI(t *testing.T) clusterCNI {
	t.Helper()
	c := clusterCNI{
		confDir:    os.Getenv("PLEXUS_CLUSTER_CNI_CONF_DIR"),
		binDir:     os.Getenv("PLEXUS_CLUSTER_CNI_BIN_DIR"),
		plugin:     os.Getenv("PLEXUS_CNI_BIN"),
		kubeconfig: os.Getenv("PLEXUS_TEST_KUBECONFIG"),
	}
	if c.confDir == "" || c.binDir == "" || c.plugin == "" {
		t.Skip("PLEXUS_CLUSTER_CNI_CONF_DIR, PLEXUS_CLUSTER_CNI_BIN_DIR and PLEXUS_CNI_BIN are not set (run `make test`)")
	}
	return c
}

// install appends plexus-cni to the cluster's primary conflist, the way the
// node agent will, and puts everything back when the test ends. It returns
// the plugin's log file.
func (c clusterCNI) install(t *testing.T) string {
	t.Helper()
	bin, err := os.ReadFile(c.plugin)
	if err != nil {
		t.Fatalf("reading the plugin binary (make build): %v", err)
	}
	dst := filepath.Join(c.binDir, "plexus-cni")
	writeAtomic(t, dst, bin, 0o755)
	t.Cleanup(func() { os.Remove(dst) })

	primary := primaryConflist(t, c.confDir)
	original, err := os.ReadFile(primary)
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(original, &list); err != nil {
		t.Fatalf("parsing %s: %v", primary, err)
	}
	logFile := filepath.Join(t.TempDir(), "plexus-cni.log")
	plugins, _ := list["plugins"].([]any)
	list["plugins"] = append(plugins, map[string]any{
		"type":       "plexus-cni",
		"kubeconfig": c.kubeconfig,
		"log_file":   logFile,
		"log_level":  "debug",
	})
	patched, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	writeAtomic(t, primary, patched, 0o644)
	t.Cleanup(func() {
		writeAtomic(t, primary, original, 0o644)
		if got, _ := os.ReadFile(primary); !bytes.Equal(got, original) {
			t.Errorf("could not restore %s", primary)
		}
	})
	// containerd watches the conf dir; give it a moment to load the change.
	time.Sleep(2 * time.Second)
	return logFile
}

// primaryConflist is the lexically first .conflist, as the runtime picks it.
func primaryConflist(t *testing.T, dir string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(dir, "*.conflist"))
	sort.Strings(matches)
	if len(matches) == 0 {
		t.Fatalf("no .conflist in %s", dir)
	}
	return matches[0]
}

func writeAtomic(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// podNetns returns a /proc path to the network namespace of the pod with
// the given UID, found through the cgroup of one of its processes.
func podNetns(t *testing.T, uid string) string {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/cgroup")
	for _, p := range procs {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		if strings.Contains(string(raw), "/pod"+uid+"/") {
			return filepath.Join(filepath.Dir(p), "ns", "net")
		}
	}
	t.Fatalf("no process of pod %s found", uid)
	return ""
}

func contains(haystack, needle string) error {
	if !strings.Contains(haystack, needle) {
		return fmt.Errorf("want %q in:\n%s", needle, haystack)
	}
	return nil
}
