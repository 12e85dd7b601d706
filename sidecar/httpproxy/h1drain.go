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

// DrainRefuseWindow is how long a draining fast path keeps a meshed
// client's idle connection open to answer its next request "draining"
// (see refuseDraining): about as long as the endpoint's removal takes to
// reach the client proxies, which meanwhile may still pick it.
const DrainRefuseWindow = 2 * time.Second

// refuseDraining answers the next request of a meshed client, if one
// comes within DrainRefuseWindow, 503 with reason draining and closes:
// once draining the proxy forwards nothing new, and a client proxy that
// gets this answer from the endpoint's identity knows the request reached
// no server and sends it to another endpoint, whatever its method.
// Closing the connection instead races with a request already on its way,
// which the client could not tell from one the server took. A plaintext
// client's connection is just closed, as before (its HTTP client retries
// what a closed idle connection lets it).
func (hc *h1conn) refuseDraining() {
	if !hc.tls.On {
		return
	}
	hc.idle.Store(false)
	end := time.Now().Add(DrainRefuseWindow)
	var raw []byte
	for {
		// Shutdown may still wake this connection once (a deadline in
		// the past) as it goes by, behind the reader's back: read again
		// until end.
		hc.rd.dl = time.Time{}
		hc.rd.until(end)
		var err error
		if raw, err = hc.rd.head(h1ReadBuf); err == nil {
			break
		}
		if !isTimeout(err) || !time.Now().Before(end) {
			return
		}
	}
	hc.head = parseRequest(raw)
	hc.fill(&hc.head)
	hc.answer(&hc.head, failure(errDraining, hc.head.grpc))
}
