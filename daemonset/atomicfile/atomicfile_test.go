package atomicfile

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func TestWriteReplacesContentAndMode(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	dir := t.TempDir()
	p := filepath.Join(dir, "f.conflist")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Write(p, []byte("new content"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "new content" {
		t.Fatalf("content = %q", got)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o644 {
		t.Fatalf("mode = %v, want 0644 despite umask 077", fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("temp file left behind: %v", entries)
	}
}

func TestWriteUnwritableDirLeavesNothing(t *testing.T) {
	if os.Geteuid() == 0 {
		// root ignores directory permissions; use a missing dir instead.
		err := Write(filepath.Join(t.TempDir(), "missing", "f"), []byte("x"), 0o644)
		if err == nil || !strings.Contains(err.Error(), "missing") {
			t.Fatalf("err = %v, want an error naming the missing dir", err)
		}
		return
	}
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o500); err != nil {
		t.Fatal(err)
	}
	defer os.Chmod(dir, 0o700)
	err := Write(filepath.Join(dir, "f"), []byte("x"), 0o644)
	if err == nil || !strings.Contains(err.Error(), dir) {
		t.Fatalf("err = %v, want an error naming %s", err, dir)
	}
}

func TestWriteIfCheckFailsLeavesOld(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := os.ErrExist
	err := WriteIf(p, []byte("new"), 0o644, func() error { return boom })
	if err != boom {
		t.Fatalf("err = %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "old" {
		t.Fatalf("content = %q", b)
	}
	if es, _ := os.ReadDir(dir); len(es) != 1 {
		t.Fatalf("temp file left: %v", es)
	}
}
