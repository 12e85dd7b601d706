package httpproxy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Draining the fast path on shutdown: its client connections are tracked
// so that idle ones close at once and busy ones after their response.

// h1conns tracks the fast path's client connections for Shutdown.
type h1conns struct {
	mu       sync.Mutex
	set      map[*h1conn]struct{}
	draining atomic.Bool
}

func (s *h1conns) add(hc *h1conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return false
	}
	if s.set == nil {
		s.set = map[*h1conn]struct{}{}
	}
	s.set[hc] = struct{}{}
	return true
}

func (s *h1conns) remove(hc *h1conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.set, hc)
}

// Shutdown ends the fast path's client connections: idle ones at once,
// busy ones after their current response (sent with Connection: close).
// When ctx ends first, the rest are cut, upstreams included.
func (p *Proxy) Shutdown(ctx context.Context) {
	s := &p.h1conns
	s.draining.Store(true)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		n := len(s.set)
		for hc := range s.set {
			if hc.idle.Load() {
				hc.c.SetReadDeadline(time.Unix(1, 0)) // wake its read; it sees draining
			}
		}
		s.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			s.mu.Lock()
			for hc := range s.set {
				hc.c.Close()
				if u := hc.up.Load(); u != nil {
					u.close()
				}
			}
			s.mu.Unlock()
			return
		}
	}
}
