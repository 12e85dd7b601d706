package discovery

// Endpoints that stop answering (balance/silence.go): a request that
// waited past its endpoint's silence limit and ended unanswered, with no
// answer from the endpoint meanwhile, marks the endpoint down, and picks
// pass it over until it answers or a probe reaches it. The probe opens a
// TCP connection to the endpoint and closes it (a meshed endpoint's proxy
// accepts it and no request reaches the application; an unmeshed
// application sees a connection open and close). It proves the node and
// the port reachable, not the application healthy. Once it connects the
// endpoint rejoins as a newcomer (its estimate the best of the others
// not down, balance.JoinRTT). The first attempt runs at once, the next
// after a wait drawn from [b/2, b] with b doubling from ProbeMinBackoff
// to ProbeMaxBackoff, each bounded by ProbeTimeout, until one connects,
// the endpoint answers a request, leaves the set, or the subscription or
// the resolver ends. An endpoint has at most one probe at a time.

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// Probe timing.
const (
	ProbeTimeout    = time.Second
	ProbeMinBackoff = 500 * time.Millisecond
	ProbeMaxBackoff = 10 * time.Second
)

// dialProbe is the default Options.Probe: a TCP connection, closed at once.
func dialProbe(ctx context.Context, addr netip.AddrPort) error {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr.String())
	if err != nil {
		return err
	}
	return c.Close()
}

// probeDown starts probing ep, at addr (its gateway's, if it has one),
// which a request or connection of s just marked down (why says how),
// unless a probe of it runs or the resolver is closing.
func (r *Resolver) probeDown(s *sub, ep *endpoint, addr netip.AddrPort, why string) {
	s.unresponsive.Add(1)
	r.opts.Log.Warn("endpoint "+why+"; passing it over until it answers or accepts a connection",
		"dst", s.dst, "endpoint", addr)
	if !ep.probing.CompareAndSwap(false, true) {
		return // the running probe goes on while it is down
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		ep.probing.Store(false)
		return
	}
	r.probing.Add(1)
	go func() {
		defer r.probing.Done()
		for r.probeUntilReached(s, ep, addr) {
			// It is reached or answered. Marked down again as the probe
			// ended? Then probe again, unless another probe took over.
			ep.probing.Store(false)
			if !ep.lb.Down() || !ep.probing.CompareAndSwap(false, true) {
				return
			}
		}
		ep.probing.Store(false)
	}()
}

// probeUntilReached probes ep until it is reached or answers a request
// (true), or until it leaves the set or the subscription ends (false).
func (r *Resolver) probeUntilReached(s *sub, ep *endpoint, addr netip.AddrPort) bool {
	backoff := ProbeMinBackoff
	for {
		switch {
		case s.ctx.Err() != nil || !s.holds(ep):
			return false
		case !ep.lb.Down():
			return true // it answered a request meanwhile
		}
		ctx, cancel := context.WithTimeout(s.ctx, ProbeTimeout)
		err := r.opts.Probe(ctx, addr)
		cancel()
		if err == nil {
			s.mu.Lock()
			now := monoNow()
			ep.lb.MarkResponsive(balance.JoinRTT(s.othersUp(ep), now), now)
			s.mu.Unlock()
			r.opts.Log.Info("endpoint accepted a probe connection; picks use it again", "dst", s.dst, "endpoint", addr)
			return true
		}
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-s.ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		backoff = min(2*backoff, ProbeMaxBackoff)
	}
}

// holds reports whether ep is still in s's set.
func (s *sub) holds(ep *endpoint) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Contains(s.eps, ep)
}

// othersUp are the balancer states of s's pickable endpoints other than
// ep that are not marked down (s.mu held).
func (s *sub) othersUp(ep *endpoint) []*balance.Endpoint {
	var out []*balance.Endpoint
	for i, other := range s.pickable {
		if other != ep && !s.lbs[i].Down() {
			out = append(out, s.lbs[i])
		}
	}
	return out
}
