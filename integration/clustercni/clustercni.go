// Package clustercni gives cluster tests the local cluster's CNI setup:
// where its conf and bin dirs are, plexus-cni installed into them by hand
// (as the node agent would), pods' network namespaces, and a lock that
// serializes tests which change the node's CNI configuration.
package clustercni

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Env says where the local cluster keeps its CNI files; test.sh sets these
// from integration/cluster/env.sh.
type Env struct {
	ConfDir, BinDir, Plugin, Kubeconfig, StateDir string
}

// Read returns the cluster's CNI setup, or skips the test outside `make test`.
func Read(t *testing.T) Env {
	t.Helper()
	e := Env{
		ConfDir:    os.Getenv("PLEXUS_CLUSTER_CNI_CONF_DIR"),
		BinDir:     os.Getenv("PLEXUS_CLUSTER_CNI_BIN_DIR"),
		Plugin:     os.Getenv("PLEXUS_CNI_BIN"),
		Kubeconfig: os.Getenv("PLEXUS_TEST_KUBECONFIG"),
		StateDir:   os.Getenv("PLEXUS_CLUSTER_STATE_DIR"),
	}
	if e.ConfDir == "" || e.BinDir == "" || e.Plugin == "" || e.StateDir == "" {
		t.Skip("PLEXUS_CLUSTER_CNI_CONF_DIR, PLEXUS_CLUSTER_CNI_BIN_DIR, PLEXUS_CNI_BIN and PLEXUS_CLUSTER_STATE_DIR are not set (run `make test`)")
	}
	return e
}

// Lock holds the node's CNI configuration (and the plexus-system
// namespace) for this test until it ends: test packages run in parallel,
// and only one of them may rewrite the conflist at a time.
func (e Env) Lock(t *testing.T) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(e.StateDir, "cni-tests.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatalf("opening the CNI test lock: %v", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		t.Fatalf("locking the CNI test lock: %v", err)
	}
	t.Cleanup(func() { f.Close() }) // closing releases the lock
}

// KeepNodeCNI takes the lock and, when the test ends, puts the node's CNI
// setup back as it was, whatever a node agent did meanwhile: the primary
// conflist byte for byte, and no plexus-cni binary. It returns the
// conflist's path and its original content.
func (e Env) KeepNodeCNI(t *testing.T) (primary string, original []byte) {
	t.Helper()
	e.Lock(t)
	primary = PrimaryConflist(t, e.ConfDir)
	original, err := os.ReadFile(primary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		WriteAtomic(t, primary, original, 0o644)
		os.Remove(filepath.Join(e.BinDir, "plexus-cni"))
	})
	return primary, original
}

// Install takes the lock, then appends plexus-cni to the cluster's primary
// conflist the way the node agent does, and puts everything back when the
// test ends. It returns the plugin's log file.
func (e Env) Install(t *testing.T) string {
	t.Helper()
	e.Lock(t)
	bin, err := os.ReadFile(e.Plugin)
	if err != nil {
		t.Fatalf("reading the plugin binary (make build): %v", err)
	}
	dst := filepath.Join(e.BinDir, "plexus-cni")
	WriteAtomic(t, dst, bin, 0o755)
	t.Cleanup(func() { os.Remove(dst) })

	primary := PrimaryConflist(t, e.ConfDir)
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
		"kubeconfig": e.Kubeconfig,
		"log_file":   logFile,
		"log_level":  "debug",
	})
	patched, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	WriteAtomic(t, primary, patched, 0o644)
	t.Cleanup(func() {
		WriteAtomic(t, primary, original, 0o644)
		if got, _ := os.ReadFile(primary); !bytes.Equal(got, original) {
			t.Errorf("could not restore %s", primary)
		}
	})
	// containerd watches the conf dir; give it a moment to load the change.
	time.Sleep(2 * time.Second)
	return logFile
}

// PrimaryConflist is the lexically first .conflist, as the runtime picks it.
func PrimaryConflist(t *testing.T, dir string) string {
	t.Helper()
	matches, _ := filepath.Glob(filepath.Join(dir, "*.conflist"))
	sort.Strings(matches)
	if len(matches) == 0 {
		t.Fatalf("no .conflist in %s", dir)
	}
	return matches[0]
}

// WriteAtomic writes data to path through a rename.
func WriteAtomic(t *testing.T, path string, data []byte, mode os.FileMode) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// PodNetns returns a /proc path to the network namespace of the pod with
// the given UID, found through the cgroup of one of its processes.
func PodNetns(t *testing.T, uid string) string {
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
