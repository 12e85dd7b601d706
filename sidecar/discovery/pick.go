package discovery

// Choosing an endpoint: peak-EWMA power of two choices for requests,
// least-loaded for opaque connections, over the endpoints failure accrual
// has not ejected; and, while a known service has none, a bounded wait.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// The queue of a service without an available endpoint, as Linkerd's: a
// pick waits up to Options.FailFastTimeout (3 s) for one, at most
// MaxWaiting at once. After a pick waited in vain the service is in
// fail-fast: picks fail at once until an endpoint is available again.
const (
	DefaultFailFastTimeout = 3 * time.Second
	MaxWaiting             = 100
)

// ErrQueueFull is returned by a pick when MaxWaiting picks already wait
// for an endpoint of the service.
var ErrQueueFull = errors.New("too many requests wait for an endpoint of the service")

// Fail-fast outcomes, the values of the reason label of
// balancer_fail_fast_total.
const (
	FailFastWaited    = "timeout"    // waited the fail-fast timeout in vain
	FailFastAtOnce    = "fail-fast"  // failed at once: the service is in fail-fast
	FailFastQueueFull = "queue-full" // MaxWaiting picks already waited
)

// pickOpts say what a pick is for.
type pickOpts struct {
	conn bool            // an opaque connection: least-loaded
	acc  *accrual.Config // the parent's failure accrual; nil: off
	zone string          // zone-aware balancing: the proxy's zone; "": off
}

// PickHTTP returns the endpoint of one HTTP request to dst: among
// backend's endpoints when it names a Service authority, else dst's,
// with the failure accrual backend carries. A service that exists without
// an available endpoint makes it wait (see DefaultFailFastTimeout). Report the
// request's outcome with Report, then call Done.
func (r *Resolver) PickHTTP(ctx context.Context, dst netip.AddrPort, backend *routes.Backend) (Pick, error) {
	var o pickOpts
	if backend != nil {
		o.acc, o.zone = backend.Accrual, backend.LocalZone
		if backend.Authority != "" {
			return r.pickService(ctx, backend.Authority, o)
		}
	}
	return r.pick(ctx, subKey{addr: dst}, dst, o)
}

// PickConn is Pick for an opaque connection: of two endpoints, the one
// with fewer connections (least-loaded power of two choices); a
// connection's lifetime says nothing of the endpoint's latency.
func (r *Resolver) PickConn(ctx context.Context, dst netip.AddrPort) (Pick, error) {
	return r.pick(ctx, subKey{addr: dst}, dst, pickOpts{conn: true})
}

// Opaque reports whether destination marks dst's endpoints opaque (the
// protocol hint), waiting only for the first answer about dst. It reads
// the cache and picks nothing (no pending count, no lookup counted: the
// connection's pick comes after). When a rollout mixes marked and
// unmarked endpoints, one marked is enough: detecting the protocol of a
// server that speaks first would stall, forwarding HTTP opaquely only
// loses its L7 features.
func (r *Resolver) Opaque(ctx context.Context, dst netip.AddrPort) bool {
	s := r.subscription(subKey{addr: dst})
	defer s.touch()
	if !s.synced.Load() {
		waitFirst(ctx, s.first, r.opts.FirstTimeout)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ep := range s.pickable {
		if ep.Opaque {
			return true
		}
	}
	return false
}

// pick serves the Pick methods: key names the subscription; dst is the
// original destination to fall back to.
func (r *Resolver) pick(ctx context.Context, key subKey, dst netip.AddrPort, o pickOpts) (Pick, error) {
	s := r.subscription(key)
	defer s.touch()
	if !s.synced.Load() {
		waitFirst(ctx, s.first, r.opts.FirstTimeout)
	}
	var deadline *time.Timer
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	for {
		s.mu.Lock()
		pk, err, wake := r.pickLocked(s, dst, o)
		if !errors.Is(err, errWait) {
			s.mu.Unlock()
			return pk, err
		}
		switch {
		case s.failFast:
			s.mu.Unlock()
			r.failFast.WithLabelValues(FailFastAtOnce).Inc()
			return Pick{}, fmt.Errorf("%s: in fail-fast, no endpoint available for %s: %w", s.dst, r.opts.FailFastTimeout, ErrNoEndpoints)
		case s.waiting >= MaxWaiting:
			s.mu.Unlock()
			r.failFast.WithLabelValues(FailFastQueueFull).Inc()
			return Pick{}, fmt.Errorf("%s: %w", s.dst, ErrQueueFull)
		}
		changed := s.changed
		s.waiting++
		s.active.Add(1) // a waiting pick keeps the subscription from the janitor
		s.mu.Unlock()
		if deadline == nil {
			deadline = time.NewTimer(r.opts.FailFastTimeout)
		}
		var probe <-chan time.Time
		var probeTimer *time.Timer
		if wake > 0 {
			probeTimer = time.NewTimer(time.Duration(wake - monoNow()))
			probe = probeTimer.C
		}
		timedOut := false
		select {
		case <-changed:
		case <-probe:
		case <-deadline.C:
			timedOut = true
		case <-ctx.Done():
		}
		if probeTimer != nil {
			probeTimer.Stop()
		}
		s.mu.Lock()
		s.waiting--
		s.active.Add(-1)
		if timedOut {
			s.failFast = true
		}
		s.mu.Unlock()
		switch {
		case timedOut:
			r.failFast.WithLabelValues(FailFastWaited).Inc()
			return Pick{}, fmt.Errorf("%s: no endpoint available in %s: %w", s.dst, r.opts.FailFastTimeout, ErrNoEndpoints)
		case ctx.Err() != nil:
			return Pick{}, fmt.Errorf("%s: waiting for an endpoint: %w", s.dst, context.Cause(ctx))
		}
	}
}

// errWait: the service exists and no endpoint is available now.
var errWait = errors.New("wait for an endpoint")

// pickLocked picks from s's cache (s.mu held). errWait says to wait; wake,
// when positive, is the monotonic time an ejected endpoint's probe is due.
func (r *Resolver) pickLocked(s *sub, dst netip.AddrPort, o pickOpts) (pk Pick, err error, wake int64) {
	switch {
	case !s.hasState:
		r.lookups.WithLabelValues(ResultUnavailable).Inc()
		if !s.warned {
			s.warned = true
			r.opts.Log.Warn("destination unavailable and nothing cached; using the original destination", "dst", s.dst, "err", s.lastErr)
		}
		return Pick{Endpoint: Endpoint{Addr: dst}, Fallback: true}, nil, 0
	case !s.exists:
		r.lookups.WithLabelValues(ResultNotFound).Inc()
		return Pick{Endpoint: Endpoint{Addr: dst}, Fallback: true}, nil, 0
	case len(s.pickable) == 0:
		r.lookups.WithLabelValues(ResultNoEndpoints).Inc()
		return Pick{}, errWait, 0
	}
	now := monoNow()
	if !o.conn {
		s.setAccrual(o.acc)
		s.setZone(o.zone)
	}
	var ep *endpoint
	var br *balance.Breaker
	var zoned bool
	switch {
	case o.conn:
		ep = s.pickable[balance.IndexLeastLoaded(s.lbs, rand.Uint64())]
	case s.acc != nil:
		var i int
		i, zoned = s.zonePick(now, true)
		if !zoned {
			i = balance.IndexP2CAvailable(s.brs, now, rand.Uint64())
		}
		if i < 0 {
			r.lookups.WithLabelValues(ResultNoEndpoints).Inc()
			return Pick{}, errWait, s.nextProbe()
		}
		ep, br = s.pickable[i], s.brs[i]
	default:
		var i int
		i, zoned = s.zonePick(now, false)
		if !zoned {
			i = balance.IndexP2C(s.lbs, now, rand.Uint64())
		}
		ep = s.pickable[i]
	}
	r.lookedUp.Inc()
	s.failFast = false // an endpoint is available again (a probe may have restored it)
	s.active.Add(1)
	pk = Pick{Endpoint: ep.Endpoint, ep: ep, s: s, br: br, r: r, zoned: zoned}
	if o.conn {
		pk.h = ep.lb.StartConn(now)
	} else {
		pk.h = ep.lb.Start(now)
	}
	return pk, nil, 0
}

// probePoll is how often picks waiting on a probe in flight look again:
// its outcome changes nothing discovery would announce.
const probePoll = 20 * time.Millisecond

// nextProbe is when waiting picks should look again (s.mu held): soon,
// while a probe is in flight, else when the first ejected endpoint's
// penalty ends; 0 for neither.
func (s *sub) nextProbe() int64 {
	var first int64
	now := monoNow()
	for _, b := range s.brs {
		if b.State(now) == balance.StateProbeInFlight {
			return now + int64(probePoll)
		}
	}
	for _, b := range s.brs {
		if end, ok := b.PenaltyEnd(); ok && (first == 0 || end < first) {
			first = end
		}
	}
	return first
}

// FirstByte records that the first response byte arrived: the request's
// round-trip time, which feeds the endpoint's peak-EWMA estimate, and on
// a zone-aware pick its typical RTT (zone.go).
func (p *Pick) FirstByte() { p.firstByteAt(monoNow()) }

// firstByteAt is FirstByte at now.
func (p *Pick) firstByteAt(now int64) {
	if rtt, ok := p.h.Observe(now); ok && p.zoned {
		p.ep.typical.Observe(rtt)
	}
}

// Connected records that the connection the request goes out on has just
// been established: its handshake is not part of the round-trip time (see
// balance.Handle.Connected).
func (p *Pick) Connected() { p.h.Connected(monoNow()) }

// Report tells failure accrual how the request ended (nothing when it is
// off). Call it once, before Done.
func (p *Pick) Report(o balance.Outcome) {
	if p.br == nil {
		return
	}
	var now int64
	if o == balance.OutcomeFailure {
		now = monoNow() // only a failure may start a penalty
	}
	if p.br.Report(o, now, rand.Uint64()) && p.s != nil {
		p.rejoin()
	}
	p.br = nil
}

// rejoin restarts the estimate of an endpoint failure accrual has just
// restored as a newcomer's, the best of the others' (balance.JoinRTT), as
// a down endpoint's probe does: the probe was one request on an endpoint
// that was failing until then, and its answer, when slow, is a peak that
// keeps the endpoint out of every pair for seconds (τ·ln(peak/peers);
// the three-node TestBreaker saw a fixed replica take none of the 650
// requests after it was restored).
func (p *Pick) rejoin() {
	p.s.mu.Lock()
	defer p.s.mu.Unlock()
	now := monoNow()
	p.ep.lb.MarkResponsive(balance.JoinRTT(p.s.othersUp(p.ep), now), now)
}

// ConnectFailed reports that a connection to the picked endpoint could
// not be opened (refused, unreachable, timed out): the endpoint is marked
// down, so that picks pass it over, and probed until it accepts a
// connection or answers (probe.go). Call it before Done; nothing happens
// for a fallback pick.
func (p *Pick) ConnectFailed() {
	if p.ep != nil && p.s != nil && p.ep.lb.MarkDown() {
		p.r.probeDown(p.s, p.ep, p.DialAddr(), "refused or did not accept a connection")
	}
}

// Done releases the pick's in-flight slot. Calls after the first are
// ignored.
func (p *Pick) Done() {
	if p.h.Waiting() && p.h.Unanswered(monoNow()) {
		p.r.probeDown(p.s, p.ep, p.DialAddr(), "left a request unanswered past its silence limit")
	}
	p.h.Done()
	if p.s != nil {
		p.s.active.Add(-1)
		p.s.touch()
		p.s = nil
	}
}
