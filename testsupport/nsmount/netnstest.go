// Package nsmount creates throwaway network namespaces for root tests,
// bind-mounted in a directory the test owns (never /run/netns, which
// belongs to the node's container runtime), and removes them when the test
// ends.
package nsmount

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"golang.org/x/sys/unix"
)

// Root skips the test unless it runs as root with iptables installed.
func Root(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root (network namespaces, iptables)")
	}
	if _, err := exec.LookPath("iptables-restore"); err != nil {
		t.Skip("iptables is not installed")
	}
}

// New creates a network namespace bind-mounted at dir/name and returns
// that path. Its loopback is up; it has no other interface.
func New(t *testing.T, dir, name string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := ns.GetCurrentNS()
		if err != nil {
			errc <- err
			return
		}
		defer orig.Close()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			errc <- fmt.Errorf("unshare: %w", err)
			return
		}
		err = unix.Mount("/proc/thread-self/ns/net", path, "none", unix.MS_BIND, "")
		if err != nil {
			err = fmt.Errorf("bind-mounting the namespace at %s: %w", path, err)
		}
		// Back to where the thread came from; a thread that cannot go back
		// stays locked and ends with this goroutine.
		if rerr := orig.Set(); rerr == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		os.Remove(path)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting network namespace %s: %v", path, err)
		}
		os.Remove(path)
	})
	Run(t, path, "ip", "link", "set", "lo", "up")
	return path
}

// Run runs a command inside the network namespace at path and returns its
// output; a failure fails the test.
func Run(t *testing.T, path string, name string, args ...string) string {
	t.Helper()
	var out []byte
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		out, err = exec.Command(name, args...).CombinedOutput()
		return err
	})
	if err != nil {
		t.Fatalf("%s %v in %s: %v: %s", name, args, path, err, out)
	}
	return string(out)
}
