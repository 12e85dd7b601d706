// Package localaddr tells whether an IP address is one of this network
// namespace's own (in a sidecar: the pod's).
package localaddr

import (
	"net"
	"net/netip"
	"sync"
	"time"
)

// rereadAfter is how often at most a miss re-reads the addresses, so a
// flood of connections to foreign addresses costs ten lookups a second.
const rereadAfter = 100 * time.Millisecond

// Set is the addresses of the interfaces of the current network
// namespace, read on first use and again on a miss (the first miss at
// once, then at most once per rereadAfter), so an address added later is
// found.
type Set struct {
	// List returns the addresses; net.InterfaceAddrs when nil.
	List func() ([]net.Addr, error)

	mu     sync.Mutex
	addrs  map[netip.Addr]struct{}
	read   bool
	readAt time.Time // of the last re-read a miss caused
}

// Has reports whether a is one of the namespace's addresses.
func (s *Set) Has(a netip.Addr) bool {
	a = a.Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.read {
		s.load()
	}
	if _, ok := s.addrs[a]; ok {
		return true
	}
	if time.Since(s.readAt) < rereadAfter {
		return false
	}
	s.readAt = time.Now()
	s.load()
	_, ok := s.addrs[a]
	return ok
}

func (s *Set) load() {
	s.read = true
	list := s.List
	if list == nil {
		list = net.InterfaceAddrs
	}
	addrs, err := list()
	if err != nil {
		return // keep what we had; the next miss a second later tries again
	}
	s.addrs = make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			s.addrs[p.Addr().Unmap()] = struct{}{}
		}
	}
}
