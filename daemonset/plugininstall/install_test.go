package plugininstall

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
)

func TestBinaryAtomicAndIdempotent(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "src")
	bin := filepath.Join(root, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho v1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	wrote, err := Binary(src, bin)
	if err != nil || !wrote {
		t.Fatalf("Binary = %v, %v", wrote, err)
	}
	dst := filepath.Join(bin, PluginBinary)
	fi, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o755 {
		t.Fatalf("mode = %v, want 0755", fi.Mode().Perm())
	}
	if wrote, err := Binary(src, bin); err != nil || wrote {
		t.Fatalf("second Binary = %v, %v; want no write", wrote, err)
	}
	fi2, _ := os.Stat(dst)
	if !os.SameFile(fi, fi2) {
		t.Fatal("identical binary was rewritten")
	}
	if err := os.WriteFile(src, []byte("#!/bin/sh\necho v2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if wrote, err := Binary(src, bin); err != nil || !wrote {
		t.Fatalf("upgrade Binary = %v, %v", wrote, err)
	}
	got, _ := os.ReadFile(dst)
	if !strings.Contains(string(got), "v2") {
		t.Fatalf("installed %q", got)
	}
	if es, _ := os.ReadDir(bin); len(es) != 1 {
		t.Fatalf("bin dir holds %d entries, want 1 (no temp files)", len(es))
	}
	if err := RemoveBinary(bin); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dst); !os.IsNotExist(err) {
		t.Fatalf("binary still there: %v", err)
	}
}

func TestBinaryUnusableDirClearError(t *testing.T) {
	root := t.TempDir()
	src := filepath.Join(root, "src")
	if err := os.WriteFile(src, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(root, "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{filepath.Join(root, "missing"), notDir} {
		_, err := Binary(src, dir)
		if err == nil || !strings.Contains(err.Error(), "CNI bin dir") || !strings.Contains(err.Error(), dir) {
			t.Errorf("Binary into %s: err = %v, want an error naming the CNI bin dir", dir, err)
		}
	}
	if os.Geteuid() != 0 {
		ro := filepath.Join(root, "ro")
		if err := os.Mkdir(ro, 0o500); err != nil {
			t.Fatal(err)
		}
		if _, err := Binary(src, ro); err == nil || !strings.Contains(err.Error(), "not writable") {
			t.Errorf("read-only dir: err = %v", err)
		}
	}
}

func TestCredentials(t *testing.T) {
	root := t.TempDir()
	sa := filepath.Join(root, "sa")
	if err := os.Mkdir(sa, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, s string) {
		if err := os.WriteFile(filepath.Join(sa, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("token", "token-1")
	write("ca.crt", "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	c := &Credentials{
		Dir:         filepath.Join(root, "var/lib/plexus"),
		HostDir:     "/var/lib/plexus",
		Server:      "https://10.96.0.1:443",
		CAFile:      filepath.Join(sa, "ca.crt"),
		TokenSource: filepath.Join(sa, "token"),
	}
	if wrote, err := c.Install(); err != nil || !wrote {
		t.Fatalf("Install = %v, %v", wrote, err)
	}
	for path, want := range map[string]os.FileMode{c.Dir: 0o700, c.KubeconfigPath(): 0o600, c.TokenPath(): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s mode = %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
	kcBefore, _ := os.ReadFile(c.KubeconfigPath())
	cfg, err := clientcmd.Load(kcBefore)
	if err != nil {
		t.Fatal(err)
	}
	auth := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	if auth.TokenFile != "/var/lib/plexus/"+TokenFile || auth.Token != "" {
		t.Fatalf("kubeconfig auth = %+v, want the host path of the token file and no inline token", auth)
	}
	if c.HostKubeconfigPath() != "/var/lib/plexus/"+KubeconfigFile {
		t.Fatalf("HostKubeconfigPath = %s", c.HostKubeconfigPath())
	}
	if cl := cfg.Clusters[cfg.Contexts[cfg.CurrentContext].Cluster]; cl.Server != c.Server || len(cl.CertificateAuthorityData) == 0 {
		t.Fatalf("kubeconfig cluster = %+v", cl)
	}

	// Rotation: only the token file changes.
	if wrote, err := c.SyncToken(); err != nil || wrote {
		t.Fatalf("SyncToken without rotation = %v, %v", wrote, err)
	}
	write("token", "token-2")
	if wrote, err := c.SyncToken(); err != nil || !wrote {
		t.Fatalf("SyncToken after rotation = %v, %v", wrote, err)
	}
	if got, _ := os.ReadFile(c.TokenPath()); string(got) != "token-2" {
		t.Fatalf("token = %q", got)
	}
	if wrote, err := c.Install(); err != nil || wrote {
		t.Fatalf("re-Install = %v, %v; want no write", wrote, err)
	}
	if kcAfter, _ := os.ReadFile(c.KubeconfigPath()); !bytes.Equal(kcBefore, kcAfter) {
		t.Fatal("kubeconfig changed on rotation")
	}
	if err := c.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(c.Dir); !os.IsNotExist(err) {
		t.Fatalf("credentials dir left: %v", err)
	}
}

func TestCredentialsUnwritableDir(t *testing.T) {
	root := t.TempDir()
	blocker := filepath.Join(root, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c := &Credentials{Dir: filepath.Join(blocker, "plexus"), Server: "https://x", CAFile: "/nonexistent", TokenSource: "/nonexistent"}
	_, err := c.Install()
	if err == nil || !strings.Contains(err.Error(), "credentials dir") {
		t.Fatalf("err = %v, want a credentials dir error", err)
	}
}
