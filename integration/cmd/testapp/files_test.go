package main

import (
	"path/filepath"
	"testing"
	"time"
)

func TestTouchEndsWhenExists(t *testing.T) {
	stop := filepath.Join(t.TempDir(), "load.stop")
	exists := whenExists(stop)
	select {
	case <-exists:
		t.Fatal("closed before the file exists")
	case <-time.After(3 * pollFiles):
	}
	if err := touch([]string{stop}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exists:
	case <-time.After(5 * time.Second):
		t.Fatal("not closed 5s after touch created the file")
	}
	if whenExists("") != nil {
		t.Error(`whenExists("") is not nil`)
	}
}

func TestCatWaitsForTheFile(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "load.json")
	// The file appears after cat started waiting.
	time.AfterFunc(3*pollFiles, func() { writeFile(out, []byte("{}\n")) })
	if err := cat([]string{"-wait", "5s", out}); err != nil {
		t.Fatalf("cat -wait 5s of a file written after 150ms: %v", err)
	}
	if err := cat([]string{"-wait", "100ms", filepath.Join(dir, "missing")}); err == nil {
		t.Error("cat -wait 100ms of a file nobody writes: no error")
	}
}
