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
		markers := []string{e.stateDir, e.runDir, filepath.Join(filepath.Dir(e.stateDir), ".cluster-b"), "/run/plexus-cluster-b"}
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
		// The cgroup roots of the nodes node.sh added (test.sh adds some),
		// in cluster a and in cluster b.
		nodes, _ := filepath.Glob("/sys/fs/cgroup/*/plexus-local-*")
		nodesB, _ := filepath.Glob("/sys/fs/cgroup/*/plexus-b-*")
		if left = append(append(left, nodes...), nodesB...); len(left) > 0 {
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
		// The pods' bridge, the added nodes' (node.sh), cluster b's nodes',
		// and the host ends of the nodes' and b's control plane's links.
		for _, bridge := range []string{e.bridge, "plexusnodes0", "plexusnodes1"} {
			if _, err := net.InterfaceByName(bridge); err == nil {
				t.Errorf("bridge %s still exists", bridge)
			}
		}
		ifaces, err := net.Interfaces()
		if err != nil {
			t.Fatal(err)
		}
		for _, ifc := range ifaces {
			if isNodeLink(ifc.Name) {
				t.Errorf("link %s still exists", ifc.Name)
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
				if strings.HasPrefix(line, ":KUBE-") || strings.HasPrefix(line, ":CNI-") || strings.HasPrefix(line, ":FLANNEL-") || strings.HasPrefix(line, ":PLXMC-") {
					t.Errorf("%s: cluster chain left: %s", save, line)
				}
			}
		}
	})
	t.Run("routes", func(t *testing.T) {
		// node.sh routes each node's pods through it, in a and b.
		out, err := exec.Command("ip", "-4", "route", "show").Output()
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			for _, prefix := range []string{"10.244.", "10.245.", "10.213.0.", "10.214.0."} {
				if strings.HasPrefix(line, prefix) {
					t.Errorf("route left: %s", line)
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

// isNodeLink reports whether name is the host end of a node.sh node's link
// (pnN in cluster a, pnbN in b) or of b's control plane's (pbcp).
func isNodeLink(name string) bool {
	for _, prefix := range []string{"pnb", "pn"} {
		if rest, ok := strings.CutPrefix(name, prefix); ok && len(rest) == 1 && rest[0] >= '1' && rest[0] <= '9' {
			return true
		}
	}
	return name == "pbcp"
}
