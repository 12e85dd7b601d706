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

	"k8s.io/client-go/tools/clientcmd"
)

// Env says where the local cluster keeps its CNI files; test.sh sets these
// from integration/cluster/env.sh. ConfDir and BinDir are node 1's, the
// node named NodeName (the nodes node.sh adds keep theirs elsewhere).
type Env struct {
	ConfDir, BinDir, Plugin, Kubeconfig, StateDir, NodeName string
	// NoHostNode: every node of the cluster is a node.sh node (cluster b
	// of a pair): ConfDir and BinDir are only the path strings its
	// nodes see.
	NoHostNode bool
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
		NodeName:   os.Getenv("PLEXUS_CLUSTER_NODE_NAME"),
	}
	if e.ConfDir == "" || e.BinDir == "" || e.Plugin == "" || e.StateDir == "" || e.NodeName == "" {
		t.Skip("PLEXUS_CLUSTER_CNI_CONF_DIR, PLEXUS_CLUSTER_CNI_BIN_DIR, PLEXUS_CNI_BIN, PLEXUS_CLUSTER_STATE_DIR and PLEXUS_CLUSTER_NODE_NAME are not set (run `make test`)")
	}
	return e
}

// ReadB returns cluster b's CNI setup (make cluster-up CLUSTERS=2;
// export_pair_env), or skips the test without it.
func ReadB(t *testing.T) Env {
	t.Helper()
	e := Env{
		ConfDir:    os.Getenv("PLEXUS_TEST_B_CNI_CONF_DIR"),
		BinDir:     os.Getenv("PLEXUS_TEST_B_CNI_BIN_DIR"),
		Plugin:     os.Getenv("PLEXUS_CNI_BIN"),
		Kubeconfig: os.Getenv("PLEXUS_TEST_KUBECONFIG_B"),
		StateDir:   os.Getenv("PLEXUS_TEST_B_STATE_DIR"),
		NodeName:   os.Getenv("PLEXUS_TEST_B_NODE_NAME"),
		NoHostNode: true,
	}
	if e.ConfDir == "" || e.BinDir == "" || e.Plugin == "" || e.Kubeconfig == "" || e.StateDir == "" || e.NodeName == "" {
		t.Skip("cluster b's PLEXUS_TEST_B_* and PLEXUS_CNI_BIN are not set (make test's pair cycle)")
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

// KeepNodeCNI takes the lock and, when the test ends, puts every node's
// CNI setup back as it was (node 1's, and those of the nodes node.sh
// added), whatever a node agent did meanwhile: the primary conflist byte
// for byte, and no plexus-cni binary. It returns node 1's conflist path
// and its original content.
func (e Env) KeepNodeCNI(t *testing.T) (primary string, original []byte) {
	t.Helper()
	e.Lock(t)
	for i, d := range e.nodeDirs(t) {
		p := PrimaryConflist(t, d.conf)
		o, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			primary, original = p, o
		}
		t.Cleanup(func() {
			WriteAtomic(t, p, o, 0o644)
			os.Remove(filepath.Join(d.bin, "plexus-cni"))
		})
	}
	return primary, original
}

// Install takes the lock, then appends plexus-cni to the primary conflist
// of every node (node 1's dirs, and those of the nodes node.sh added)
// the way the node agent does, and puts everything back when the test
// ends. It returns the plugin's log file (one for every node).
func (e Env) Install(t *testing.T) string {
	t.Helper()
	e.Lock(t)
	bin, err := os.ReadFile(e.Plugin)
	if err != nil {
		t.Fatalf("reading the plugin binary (make build): %v", err)
	}
	logFile := filepath.Join(t.TempDir(), "plexus-cni.log")
	for _, d := range e.nodeDirs(t) {
		e.installOn(t, d, bin, logFile)
	}
	// containerd watches the conf dir; give it a moment to load the change.
	time.Sleep(2 * time.Second) // Sleep: nothing tells when containerd has reloaded its CNI config
	return logFile
}

// nodeDirs are the CNI conf and bin dirs of every node: node 1's, then
// those of the nodes node.sh added ($StateDir/nodes/NAME/cni).
func (e Env) nodeDirs(t *testing.T) []cniDirs {
	t.Helper()
	var dirs []cniDirs
	if !e.NoHostNode {
		dirs = append(dirs, cniDirs{conf: e.ConfDir, bin: e.BinDir, kubeconfig: e.Kubeconfig})
	}
	added, err := filepath.Glob(filepath.Join(e.StateDir, "nodes", "*", "cni"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(added)
	for _, d := range added {
		node := filepath.Dir(d)
		dirs = append(dirs, cniDirs{conf: filepath.Join(d, "net.d"), bin: filepath.Join(d, "bin"),
			kubeconfig: e.kubeconfigFor(t, filepath.Join(node, "kubelet.kubeconfig"))})
	}
	return dirs
}

// cniDirs are one node's CNI dirs, and the kubeconfig its plugin uses.
type cniDirs struct{ conf, bin, kubeconfig string }

// kubeconfigFor writes Env.Kubeconfig with the API server address the
// node whose kubelet uses nodeKubeconfig reaches it at: an added node
// has a network namespace of its own, where 127.0.0.1 is not node 1.
func (e Env) kubeconfigFor(t *testing.T, nodeKubeconfig string) string {
	t.Helper()
	node, err := clientcmd.LoadFromFile(nodeKubeconfig)
	if err != nil {
		t.Fatalf("reading the node's kubeconfig: %v", err)
	}
	server := ""
	for _, c := range node.Clusters {
		server = c.Server
	}
	cfg, err := clientcmd.LoadFromFile(e.Kubeconfig)
	if err != nil {
		t.Fatalf("reading the test kubeconfig: %v", err)
	}
	for _, c := range cfg.Clusters {
		c.Server = server
	}
	out := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, out); err != nil {
		t.Fatal(err)
	}
	return out
}

// installOn installs the plugin binary into d's bin dir and chains it
// into d's primary conflist, both undone when the test ends.
func (e Env) installOn(t *testing.T, d cniDirs, bin []byte, logFile string) {
	t.Helper()
	dst := filepath.Join(d.bin, "plexus-cni")
	WriteAtomic(t, dst, bin, 0o755)
	t.Cleanup(func() { os.Remove(dst) })

	primary := PrimaryConflist(t, d.conf)
	original, err := os.ReadFile(primary)
	if err != nil {
		t.Fatal(err)
	}
	var list map[string]any
	if err := json.Unmarshal(original, &list); err != nil {
		t.Fatalf("parsing %s: %v", primary, err)
	}
	plugins, _ := list["plugins"].([]any)
	list["plugins"] = append(plugins, map[string]any{
		"type":       "plexus-cni",
		"kubeconfig": d.kubeconfig,
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
}

// PrimaryConflists are every node's primary conflist, node 1's first.
func (e Env) PrimaryConflists(t *testing.T) []string {
	t.Helper()
	var paths []string
	for _, d := range e.nodeDirs(t) {
		paths = append(paths, PrimaryConflist(t, d.conf))
	}
	return paths
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
