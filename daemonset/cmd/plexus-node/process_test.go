package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

const calico = `{
  "name": "k8s-pod-network",
  "cniVersion": "0.3.1",
  "plugins": [
    {"type": "calico", "datastore_type": "kubernetes", "ipam": {"type": "calico-ipam"}},
    {"type": "portmap", "snat": true, "capabilities": {"portMappings": true}}
  ]
}
`

// buildSelf compiles plexus-node; the tests below run the real binary.
func buildSelf(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "plexus-node")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func write(t *testing.T, path, body string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), mode); err != nil {
		t.Fatal(err)
	}
}

func TestProcessImageInstallUninstall(t *testing.T) {
	bin := buildSelf(t)
	root := filepath.Join(t.TempDir(), "img")
	conf := filepath.Join(root, "etc/cni/net.d/10-calico.conflist")
	write(t, conf, calico, 0o644)
	if err := os.MkdirAll(filepath.Join(root, "opt/cni/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(t.TempDir(), "plexus-cni")
	write(t, plugin, "#!/bin/sh\n", 0o755)

	out, err := exec.Command(bin, "install", "--root", root, "--plugin-binary", plugin, "--kubeconfig", "/var/lib/kubelet/kubeconfig").CombinedOutput()
	if err != nil {
		t.Fatalf("install: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(conf)
	if !strings.Contains(string(b), `"type": "plexus-cni"`) || !strings.Contains(string(b), "/var/lib/kubelet/kubeconfig") {
		t.Fatalf("after install:\n%s", b)
	}
	out, err = exec.Command(bin, "uninstall", "--root", root).CombinedOutput()
	if err != nil {
		t.Fatalf("uninstall: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(conf); !bytes.Equal(b, []byte(calico)) {
		t.Fatalf("after uninstall:\n%s", b)
	}
	if _, err := os.Stat(filepath.Join(root, "opt/cni/bin/plexus-cni")); !os.IsNotExist(err) {
		t.Fatalf("binary left: %v", err)
	}
}

func TestProcessRunSIGTERMLeavesPlugin(t *testing.T) {
	bin := buildSelf(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "host")
	conf := filepath.Join(root, "etc/cni/net.d/10-calico.conflist")
	write(t, conf, calico, 0o644)
	if err := os.MkdirAll(filepath.Join(root, "opt/cni/bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	write(t, filepath.Join(dir, "plexus-cni"), "#!/bin/sh\n", 0o755)
	write(t, filepath.Join(dir, "sa/token"), "tok", 0o644)
	write(t, filepath.Join(dir, "sa/ca.crt"), "ca", 0o644)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()

	cmd := exec.Command(bin, "run", "--root", root, "--plugin-binary", filepath.Join(dir, "plexus-cni"),
		"--api-server", "https://10.96.0.1:443", "--ca-file", filepath.Join(dir, "sa/ca.crt"),
		"--token-file", filepath.Join(dir, "sa/token"), "--listen", addr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if !eventually.Holds(5*time.Second, func() bool {
		resp, err := http.Get("http://" + addr + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	}) {
		t.Fatalf("never ready; log:\n%s", stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
	}
	b, _ := os.ReadFile(conf)
	if !strings.Contains(string(b), `"type": "plexus-cni"`) {
		t.Fatalf("SIGTERM removed the entry:\n%s", b)
	}
	for _, p := range []string{"opt/cni/bin/plexus-cni", "var/lib/plexus/plexus-cni.kubeconfig", "var/lib/plexus/plexus-cni.token"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("SIGTERM removed %s: %v", p, err)
		}
	}
}

// TestProcessWaitUntilSIGTERM: the cleanup DaemonSet's container stays
// up (ready) until it is deleted, then exits at once and cleanly.
func TestProcessWaitUntilSIGTERM(t *testing.T) {
	bin := buildSelf(t)
	if out, err := exec.Command(bin, "wait", "extra").CombinedOutput(); err == nil {
		t.Fatalf("wait with an argument succeeded: %s", out)
	}
	cmd := exec.Command(bin, "wait")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("wait exited on its own: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("wait ignored SIGTERM")
	}
}
