package podnetns

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/plexus-mesh/plexus/testsupport/nsmount"
)

func addrs(s ...string) []netip.Addr {
	out := make([]netip.Addr, len(s))
	for i, a := range s {
		out[i] = netip.MustParseAddr(a)
	}
	return out
}

func addAddr(t *testing.T, netns, cidr string) {
	t.Helper()
	nsmount.Run(t, netns, "ip", "addr", "add", cidr, "dev", "lo")
}

func TestFindInRealNamespaces(t *testing.T) {
	nsmount.Root(t)
	dir := t.TempDir()
	a := nsmount.New(t, dir, "cni-a")
	b := nsmount.New(t, dir, "cni-b")
	addAddr(t, a, "10.99.0.5/32")
	addAddr(t, b, "10.99.0.6/32")
	addAddr(t, b, "fd00:99::6/128")
	if err := os.WriteFile(filepath.Join(dir, "not-a-netns"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	find := func(want string, ips ...string) {
		t.Helper()
		got, err := f.Find(addrs(ips...))
		if err != nil || got != want {
			t.Fatalf("Find(%v) = %q, %v; want %q", ips, got, err, want)
		}
	}
	find(a, "10.99.0.5")
	find(b, "fd00:99::6")
	find(b, "10.99.0.9", "10.99.0.6") // any of the pod's IPs

	if _, err := f.Find(addrs("10.99.0.7")); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "10.99.0.7") {
		t.Errorf("unknown IP: err = %v, want ErrNotFound naming the IP", err)
	}

	// A namespace created after the first scan is found by the rescan a
	// miss triggers.
	c := nsmount.New(t, dir, "cni-c")
	addAddr(t, c, "10.99.0.7/32")
	find(c, "10.99.0.7")

	// An address that moved (a pod replaced, its IP reused) is not
	// answered from the cache.
	nsmount.Run(t, a, "ip", "addr", "del", "10.99.0.5/32", "dev", "lo")
	addAddr(t, c, "10.99.0.5/32")
	find(c, "10.99.0.5")

	// Two namespaces holding one address: no guess.
	addAddr(t, a, "10.99.0.8/32")
	addAddr(t, c, "10.99.0.8/32")
	if _, err := f.Find(addrs("10.99.0.8")); err == nil || !strings.Contains(err.Error(), "refusing to guess") {
		t.Errorf("shared IP: err = %v, want a refusal", err)
	}

	if _, err := f.Find(nil); err == nil {
		t.Error("Find(no IPs) succeeded")
	}
}

// TestFindSkipsOwnNamespace bind-mounts the test's own network namespace
// (the host's) into the directory: its addresses must never match.
func TestFindSkipsOwnNamespace(t *testing.T) {
	nsmount.Root(t)
	var hostIP netip.Addr
	ifAddrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range ifAddrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLoopback() {
			hostIP = p.Addr()
			break
		}
	}
	if !hostIP.IsValid() {
		t.Skip("the host has no address besides loopback")
	}
	dir := t.TempDir()
	host := filepath.Join(dir, "host")
	if err := os.WriteFile(host, nil, 0o444); err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread() // a thread of this test, in its own namespace
	err = unix.Mount("/proc/thread-self/ns/net", host, "none", unix.MS_BIND, "")
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(host, unix.MNT_DETACH) })

	f, err := New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := f.Find([]netip.Addr{hostIP}); !errors.Is(err, ErrNotFound) {
		t.Errorf("Find(host IP %s) = %q, %v; want ErrNotFound", hostIP, got, err)
	}
}

func TestNewRejectsRelativeDir(t *testing.T) {
	if _, err := New("run/netns"); err == nil {
		t.Error("New(relative dir) succeeded")
	}
}
