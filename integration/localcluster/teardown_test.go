package localcluster

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// teardownEnv names what cluster-down must have removed; integration/test.sh
// sets these after it ran cluster-down.
type teardownEnv struct {
	stateDir, runDir, nodeIP, bridge, sysctlsBefore string
}

func readTeardownEnv(t *testing.T) teardownEnv {
	if os.Getenv("PLEXUS_EXPECT_CLUSTER_DOWN") != "1" {
		t.Skip("PLEXUS_EXPECT_CLUSTER_DOWN is not 1: integration/test.sh runs this after cluster-down")
	}
	e := teardownEnv{
		stateDir:      os.Getenv("PLEXUS_CLUSTER_STATE_DIR"),
		runDir:        os.Getenv("PLEXUS_CLUSTER_RUN_DIR"),
		nodeIP:        os.Getenv("PLEXUS_CLUSTER_NODE_IP"),
		bridge:        os.Getenv("PLEXUS_CLUSTER_BRIDGE"),
		sysctlsBefore: os.Getenv("PLEXUS_CLUSTER_SYSCTLS_BEFORE"),
	}
	for name, v := range map[string]string{"STATE_DIR": e.stateDir, "RUN_DIR": e.runDir, "NODE_IP": e.nodeIP, "BRIDGE": e.bridge, "SYSCTLS_BEFORE": e.sysctlsBefore} {
		if v == "" {
			t.Fatalf("PLEXUS_CLUSTER_%s is not set", name)
		}
	}
	return e
}

func TestTeardownLeavesNothing(t *testing.T) {
	e := readTeardownEnv(t)

	t.Run("processes", func(t *testing.T) {
		// Every daemon the cluster starts names a file under one of these in
		// its command line (containerd shims name the socket in runDir);
		// pod processes are covered by the cgroup check.
		markers := []string{e.stateDir, e.runDir}
		procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
		for _, p := range procs {
			raw, err := os.ReadFile(p)
			if err != nil || len(raw) == 0 {
				continue // exited, or a kernel thread
			}
			cmdline := string(bytes.ReplaceAll(raw, []byte{0}, []byte{' '}))
			for _, m := range markers {
				if strings.Contains(cmdline, m) {
					t.Errorf("process %s still running: %s", filepath.Base(filepath.Dir(p)), cmdline)
				}
			}
		}
	})
	t.Run("cgroups", func(t *testing.T) {
		left, _ := filepath.Glob("/sys/fs/cgroup/*/kubepods")
		// The cgroup roots of the nodes node.sh added (test.sh adds one).
		nodes, _ := filepath.Glob("/sys/fs/cgroup/*/plexus-local-*")
		if left = append(left, nodes...); len(left) > 0 {
			t.Errorf("kubelet cgroups left: %v", left)
		}
	})
	t.Run("netns", func(t *testing.T) {
		entries, err := os.ReadDir("/run/netns")
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		for _, ent := range entries {
			t.Errorf("network namespace left: %s", ent.Name())
		}
	})
	t.Run("links and addresses", func(t *testing.T) {
		// The pods' bridge, and the added nodes' (node.sh).
		for _, bridge := range []string{e.bridge, "plexusnodes0"} {
			if _, err := net.InterfaceByName(bridge); err == nil {
				t.Errorf("bridge %s still exists", bridge)
			}
		}
		lo, err := net.InterfaceByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		addrs, _ := lo.Addrs()
		for _, a := range addrs {
			if strings.HasPrefix(a.String(), e.nodeIP+"/") {
				t.Errorf("node address %s still on lo", a)
			}
		}
	})
	t.Run("iptables", func(t *testing.T) {
		for _, save := range []string{"iptables-save", "ip6tables-save"} {
			out, err := exec.Command(save).Output()
			if err != nil {
				t.Fatalf("%s: %v", save, err)
			}
			for _, line := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(line, ":KUBE-") || strings.HasPrefix(line, ":CNI-") {
					t.Errorf("%s: cluster chain left: %s", save, line)
				}
			}
		}
	})
	t.Run("files", func(t *testing.T) {
		for _, dir := range []string{e.stateDir, e.runDir} {
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Errorf("%s still exists (err=%v)", dir, err)
			}
		}
	})
	t.Run("runtime leftovers", func(t *testing.T) {
		// libcni caches one result per sandbox and network; containerd keeps
		// shim sockets in a fixed directory. None of ours may outlive the cluster.
		results, _ := filepath.Glob("/var/lib/cni/results/*")
		for _, r := range results {
			base := filepath.Base(r)
			if strings.HasPrefix(base, "plexus-local-") || strings.HasPrefix(base, "cni-loopback-") {
				t.Errorf("libcni result cache left: %s", r)
			}
		}
		sockets, _ := filepath.Glob("/run/containerd/s/*")
		for _, s := range sockets {
			t.Errorf("containerd shim socket left: %s", s)
		}
	})
	t.Run("sysctls", func(t *testing.T) {
		before, err := os.ReadFile(e.sysctlsBefore)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(before)), "\n") {
			key, want, _ := strings.Cut(line, "=")
			raw, err := os.ReadFile("/proc/sys/" + strings.ReplaceAll(key, ".", "/"))
			if err != nil {
				t.Errorf("reading %s: %v", key, err)
				continue
			}
			if got := strings.TrimSpace(string(raw)); got != want {
				t.Errorf("sysctl %s = %s, was %s before the cluster", key, got, want)
			}
		}
	})
}
