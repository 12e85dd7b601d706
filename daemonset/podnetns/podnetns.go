// Package podnetns finds the network namespace of a pod on this node by
// the pod's IP addresses, among the namespaces the container runtime keeps
// bind-mounted in one directory (/run/netns for containerd and CRI-O).
package podnetns

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/containernetworking/plugins/pkg/ns"
)

// ErrNotFound is returned when no namespace in the directory holds any of
// the pod's IPs.
var ErrNotFound = errors.New("no network namespace holds the pod's IPs")

// Finder looks pods' namespaces up in Dir. It remembers each namespace's
// addresses and reads them all again only when a lookup misses; a hit is
// confirmed by reading that one namespace's addresses. It is safe for
// concurrent use.
type Finder struct {
	dir  string
	self fileID // the agent's own (the host's) namespace, never a pod's

	mu    sync.Mutex
	known map[string]entry // path -> what it held when last read
}

type fileID struct{ dev, ino uint64 }

type entry struct {
	id  fileID
	ips []netip.Addr
}

// New returns a finder for the namespaces bind-mounted in dir, as the
// agent reaches it (under --root in the DaemonSet).
func New(dir string) (*Finder, error) {
	if !filepath.IsAbs(dir) {
		return nil, fmt.Errorf("netns dir %q is not an absolute path", dir)
	}
	self, err := ownNetns()
	if err != nil {
		return nil, fmt.Errorf("reading the agent's own network namespace: %w", err)
	}
	return &Finder{dir: dir, self: self, known: map[string]entry{}}, nil
}

// Dir is the directory searched.
func (f *Finder) Dir() string { return f.dir }

// Find returns the path of the one namespace that holds any of ips. It
// fails with ErrNotFound when none does, and when two namespaces share an
// address (a namespace is never guessed).
func (f *Finder) Find(ips []netip.Addr) (string, error) {
	if len(ips) == 0 {
		return "", errors.New("finding a pod's network namespace: the pod has no IP")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for path, e := range f.known {
		if !holdsAny(e.ips, ips) {
			continue
		}
		if now, err := f.read(path); err == nil && now.id == e.id && holdsAny(now.ips, ips) {
			f.known[path] = now
			return path, nil
		}
		break // stale: the namespace is gone or changed; read them all
	}
	unreadable, err := f.rescan()
	if err != nil {
		return "", err
	}
	var found []string
	for path, e := range f.known {
		if holdsAny(e.ips, ips) {
			found = append(found, path)
		}
	}
	switch len(found) {
	case 0:
		if unreadable != nil {
			// e.g. setns without CAP_SYS_ADMIN: say so, not just "not found".
			return "", fmt.Errorf("%w (%s) in %s; some could not be read: %w", ErrNotFound, joinAddrs(ips), f.dir, unreadable)
		}
		return "", fmt.Errorf("%w (%s) in %s", ErrNotFound, joinAddrs(ips), f.dir)
	case 1:
		return found[0], nil
	}
	slices.Sort(found)
	return "", fmt.Errorf("pod IPs %s are held by %d network namespaces (%s); refusing to guess",
		joinAddrs(ips), len(found), strings.Join(found, ", "))
}

// rescan reads every namespace in the directory again; namespaces that
// are gone are forgotten. Entries that are not network namespaces, or no
// longer exist, are skipped; the first other failure to read one (no
// permission to enter it) is returned as unreadable.
func (f *Finder) rescan() (unreadable, err error) {
	entries, err := os.ReadDir(f.dir)
	if err != nil {
		return nil, fmt.Errorf("listing network namespaces: %w", err)
	}
	known := make(map[string]entry, len(entries))
	for _, de := range entries {
		if de.IsDir() {
			continue
		}
		path := filepath.Join(f.dir, de.Name())
		e, err := f.read(path)
		var notNS ns.NSPathNotNSErr
		var gone ns.NSPathNotExistErr
		switch {
		case err == nil:
			known[path] = e
		case errors.Is(err, errSelf), errors.Is(err, os.ErrNotExist), errors.As(err, &notNS), errors.As(err, &gone):
		case unreadable == nil:
			unreadable = err
		}
	}
	f.known = known
	return unreadable, nil
}

// errSelf marks the agent's own namespace, which is never a pod's.
var errSelf = errors.New("the agent's own network namespace")

// read returns the namespace's identity and the addresses of its
// interfaces, read from a thread switched into it.
func (f *Finder) read(path string) (entry, error) {
	id, err := idOf(path)
	if err != nil {
		return entry{}, err
	}
	if id == f.self {
		return entry{}, errSelf
	}
	var ips []netip.Addr
	err = ns.WithNetNSPath(path, func(ns.NetNS) error {
		addrs, err := net.InterfaceAddrs()
		if err != nil {
			return err
		}
		for _, a := range addrs {
			if ipnet, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(ipnet.IP); ok {
					ips = append(ips, ip.Unmap())
				}
			}
		}
		return nil
	})
	if err != nil {
		return entry{}, fmt.Errorf("reading addresses in %s: %w", path, err)
	}
	return entry{id: id, ips: ips}, nil
}

// ownNetns identifies the namespace the process runs in, read from a
// thread that is not switched into another one (/proc/self is the main
// thread, which the Go runtime may have parked in any namespace).
func ownNetns() (fileID, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return idOf("/proc/thread-self/ns/net")
}

func idOf(path string) (fileID, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return fileID{}, err
	}
	return fileID{dev: st.Dev, ino: st.Ino}, nil
}

func holdsAny(have, want []netip.Addr) bool {
	for _, w := range want {
		if slices.Contains(have, w.Unmap()) {
			return true
		}
	}
	return false
}

func joinAddrs(ips []netip.Addr) string {
	s := make([]string, len(ips))
	for i, a := range ips {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}
