package clustertest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// BAPIServer is cluster b's API server address, in its control plane's
// network namespace on b's nodes' bridge (integration/cluster/env.sh): a's
// pods reach it unless the clusters are isolated.
const BAPIServer = "10.214.0.250:6443"

// RepoRoot is the Plexus checkout this package was built from.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// PairMode sets the network between the two local clusters to mode
// (isolated, flat or hierarchical: integration/cluster/pair.sh) and
// returns the mode it was in; mode "" only returns it. The caller restores
// the mode it found (t.Cleanup).
func PairMode(t testing.TB, mode string) string {
	t.Helper()
	script := filepath.Join(RepoRoot(), "integration", "cluster", "pair.sh")
	out, err := exec.Command(script, "mode").Output()
	if err != nil {
		t.Fatalf("pair.sh mode: %v", err)
	}
	if mode != "" {
		if out, err := exec.Command(script, "mode", mode).CombinedOutput(); err != nil {
			t.Fatalf("pair.sh mode %s: %v: %s", mode, err, out)
		}
	}
	return strings.TrimSpace(string(out))
}

// The local clusters' pod networks (integration/cluster/env.sh).
const (
	APodCIDR = "10.244.0.0/16"
	BPodCIDR = "10.245.0.0/16"
)

// StopB stops cluster b's API server and node without a word
// (integration/cluster/pause.sh: SIGSTOP, and its pods frozen) and
// returns what lets them go on, which t.Cleanup also calls; calling it
// more than once does nothing more.
func StopB(t testing.TB) (cont func()) {
	t.Helper()
	script := filepath.Join(RepoRoot(), "integration", "cluster", "pause.sh")
	pause := func(verb string) error {
		cmd := exec.Command(script, verb)
		cmd.Env = append(os.Environ(), "PLEXUS_CLUSTER_NAME=b")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("PLEXUS_CLUSTER_NAME=b pause.sh %s: %v: %s", verb, err, out)
		}
		return nil
	}
	var once sync.Once
	cont = func() {
		once.Do(func() {
			if err := pause("cont"); err != nil {
				t.Error(err)
			}
		})
	}
	t.Cleanup(cont)
	if err := pause("stop"); err != nil {
		t.Fatal(err)
	}
	return cont
}
