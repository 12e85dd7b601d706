package discovery

// Endpoints that stop answering (balance/silence.go): a request that
// waited past its endpoint's silence limit and ended unanswered marks the
// endpoint down, and picks pass it over until it answers or a probe
// reaches it. The probe opens a TCP connection to the endpoint and closes
// it (a meshed endpoint's proxy accepts it; no request reaches the
// application), and once it connects the endpoint rejoins as a newcomer
// (its estimate the set's best, balance.JoinRTT): at once, then after a backoff doubling from
// ProbeMinBackoff to ProbeMaxBackoff, each attempt bounded by
// ProbeTimeout, until it connects, the endpoint leaves the set or the
// resolver closes. Only the request that marks an endpoint down starts
// its probe, so an endpoint has at most one.

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

// probeUnresponsive starts probing ep, which a request of s just marked
// down.
func (r *Resolver) probeUnresponsive(s *sub, ep *endpoint) {
	s.unresponsive.Add(1)
	r.opts.Log.Warn("endpoint left a request unanswered past its silence limit; passing it over until it answers or accepts a connection",
		"dst", s.dst, "endpoint", ep.Addr)
	r.probing.Add(1)
	go func() {
		defer r.probing.Done()
		r.probeUntilReached(s, ep)
	}()
}

func (r *Resolver) probeUntilReached(s *sub, ep *endpoint) {
	backoff := ProbeMinBackoff
	for {
		if !ep.lb.Down() || !s.holds(ep) {
			return // it answered a request meanwhile, or left the set
		}
		ctx, cancel := context.WithTimeout(r.ctx, ProbeTimeout)
		err := r.opts.Probe(ctx, ep.Addr)
		cancel()
		if err == nil {
			s.mu.Lock()
			now := monoNow()
			ep.lb.MarkResponsive(balance.JoinRTT(s.lbs, now), now)
			s.mu.Unlock()
			r.opts.Log.Info("endpoint accepted a probe connection; picks use it again", "dst", s.dst, "endpoint", ep.Addr)
			return
		}
		// Full jitter over the upper half: probes of many proxies spread.
		wait := backoff/2 + rand.N(backoff/2+1)
		t := time.NewTimer(wait)
		select {
		case <-r.ctx.Done():
			t.Stop()
			return
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
