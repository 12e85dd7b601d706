package discovery

// Zone-aware balancing, on when the parent Service asks for it (the
// policy's ZoneAware, routes.Backend.LocalZone): a request goes to an
// endpoint in the proxy's own zone — the best of two local ones, as
// peak-EWMA P2C picks — unless the local side cannot serve it as well as
// the other zones (spill, below); then to the best of two elsewhere.
//
// Whether to spill is not decided on the peak-EWMA costs that choose
// within a side. A local endpoint takes nearly every request, so its
// estimate follows its latency's tail (peaks); a remote one, sampled now
// and then, holds a typical value; and a cost multiplies the estimate by
// the requests in flight. On a busy node the local tail alone is over
// twice the remote's typical, and one request in flight halves what is
// left of the margin: the zone spilled with no slowdown at all, traffic
// swung between the zones (the three-node demo's windows had 130 of 304
// requests local, then 303 of 304, then 159 of 305). Instead:
//
//   - unavailable: no local endpoint is available (failure accrual
//     ejected them), or the local one is unresponsive and the remote not
//     (balance/silence.go): spill. A local endpoint whose probe is due
//     (failure accrual) takes the request whatever the rules below say:
//     it is the way back.
//   - load: the local endpoint has spillPending requests or more in
//     flight and would keep the request more than SpillRatio times as
//     long as the remote one (typical RTT × (pending + 1)): spill this
//     request.
//   - latency: the zone is slow while the local endpoint's typical RTT
//     is above enterSlow (3× the best remote one's and 25 ms more,
//     remoteBest); it stops being slow when it is back within leaveSlow
//     (2× and 12.5 ms more).
//     While slow, requests spill but one every localProbeEvery, which
//     measures the local side.
//   - otherwise the request stays, but one every remoteRefreshEvery goes
//     to the remote side to keep its typical RTT current.
//
// The typical RTT (balance.Typical) is an average that one slow answer moves
// by little and a sustained change moves within a few answers. It is
// sampled only on zone-aware picks: with zone-aware balancing off, none
// of this runs.

import (
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// The spill rules' parameters (see above).
const (
	SpillRatio         = 2.0
	spillPending       = 4
	localProbeEvery    = 250 * time.Millisecond
	remoteRefreshEvery = 5 * time.Second
)

// enterSlow and leaveSlow: a zone whose local typical RTT l is above
// enterSlow(r), r the remote's, is slow until l is back within
// leaveSlow(r). The absolute margins keep a node's scheduling noise (a
// few ms) from counting as slowness when RTTs are a millisecond.
func enterSlow(r float64) float64 { return max(3*r, r+float64(25*time.Millisecond)) }
func leaveSlow(r float64) float64 { return max(2*r, r+float64(12500*time.Microsecond)) }

// zoneSplit is the zone split of a sub's pickable endpoints (under the
// sub's lock). Rebuilt with them; nothing while zone is "".
type zoneSplit struct {
	zone                string // the proxy's zone; "": zone-aware balancing off
	local, remote       []int  // indices into pickable
	localEps, remoteEps []*endpoint
	localLbs, remoteLbs []*balance.Endpoint
	localBrs, remoteBrs []*balance.Breaker // with failure accrual

	slow bool // the latency rule holds the zone slow
	// remoteBestRTT is remoteBest's figure, taken over every remote
	// endpoint at remoteBestAt (monotonic ns; 0: never).
	remoteBestRTT float64
	remoteBestAt  int64
	// nextLocal is when, while slow, the next request goes local;
	// nextRemote when, while not, the next goes remote (monotonic ns).
	nextLocal, nextRemote int64

	// localPicks and remotePicks count zone-aware picks by where they
	// went.
	localPicks, remotePicks atomic.Uint64
}

// setZone turns zone-aware balancing on for zone, or off (""), unless it
// already is; s.mu is held.
func (s *sub) setZone(zone string) {
	if s.zs.zone == zone {
		return
	}
	s.zs.zone = zone
	s.zs.split(s.pickable, s.lbs, s.brs)
}

// zonePick is the zone-aware pick of s (s.mu held), with fresh random
// words; while zone-aware balancing is off it returns (-1, false) after
// one comparison, drawing nothing.
func (s *sub) zonePick(now int64, accrual bool) (i int, ok bool) {
	if s.zs.zone == "" {
		return -1, false
	}
	return s.zs.pick(now, rand.Uint64(), rand.Uint64(), accrual)
}

// split recomputes the split of pickable (whose balancer states and
// breakers are lbs and brs; brs nil without accrual).
func (z *zoneSplit) split(pickable []*endpoint, lbs []*balance.Endpoint, brs []*balance.Breaker) {
	z.local, z.remote, z.localEps, z.remoteEps = nil, nil, nil, nil
	z.remoteBestRTT, z.remoteBestAt = 0, 0
	z.localLbs, z.remoteLbs, z.localBrs, z.remoteBrs = nil, nil, nil, nil
	if z.zone == "" {
		return
	}
	for i, ep := range pickable {
		if ep.Labels["zone"] == z.zone {
			z.local = append(z.local, i)
			z.localEps = append(z.localEps, ep)
			z.localLbs = append(z.localLbs, lbs[i])
			if brs != nil {
				z.localBrs = append(z.localBrs, brs[i])
			}
		} else {
			z.remote = append(z.remote, i)
			z.remoteEps = append(z.remoteEps, ep)
			z.remoteLbs = append(z.remoteLbs, lbs[i])
			if brs != nil {
				z.remoteBrs = append(z.remoteBrs, brs[i])
			}
		}
	}
}

// pick returns the index in pickable of a zone-aware pick (accrual: pick
// among available breakers only), rl and rr drawing the local and remote
// pairs. ok is false when zone-aware balancing does not decide: it is
// off, no endpoint is local, or none is available at all; the caller
// then picks as without it.
func (z *zoneSplit) pick(now int64, rl, rr uint64, accrual bool) (i int, ok bool) {
	if z.zone == "" || len(z.local) == 0 {
		return -1, false
	}
	li, ri := -1, -1
	if accrual {
		li = balance.IndexP2CAvailable(z.localBrs, now, rl)
		if len(z.remote) > 0 {
			ri = balance.IndexP2CAvailable(z.remoteBrs, now, rr)
		}
	} else {
		li = balance.IndexP2C(z.localLbs, now, rl)
		if len(z.remote) > 0 {
			ri = balance.IndexP2C(z.remoteLbs, now, rr)
		}
	}
	if li < 0 && ri < 0 {
		return -1, false
	}
	// With accrual, picking a pair claims a due probe; a probe the request
	// does not go to is given back, or its endpoint would stay out.
	probe := accrual && li >= 0 && z.localBrs[li].Claimed()
	if li < 0 || ri >= 0 && !probe && z.spill(z.localEps[li], z.remoteEps[ri], now) {
		if li >= 0 && accrual {
			z.localBrs[li].Unclaim()
		}
		z.remotePicks.Add(1)
		return z.remote[ri], true
	}
	if ri >= 0 && accrual {
		z.remoteBrs[ri].Unclaim()
	}
	z.localPicks.Add(1)
	return z.local[li], true
}

// spill reports whether a request should go to the remote endpoint rather
// than the local one, by the rules at the top of this file, and moves
// their state on.
func (z *zoneSplit) spill(local, remote *endpoint, now int64) bool {
	l, r := local.lb, remote.lb
	if lu, ru := l.Unresponsive(now), r.Unresponsive(now); lu != ru {
		return lu
	}
	lt, rt := local.typical.Get(), remote.typical.Get()
	if lp := l.Pending(); lp >= spillPending {
		lw, rw := float64(lp+1), float64(r.Pending()+1)
		if lt > 0 && rt > 0 {
			lw, rw = lw*lt, rw*rt
		}
		if lw > SpillRatio*rw {
			return true
		}
	}
	if ref := z.remoteBest(rt, now); lt > 0 && ref > 0 {
		switch {
		case !z.slow && lt > enterSlow(ref):
			z.slow, z.nextLocal = true, now+int64(localProbeEvery)
		case z.slow && lt <= leaveSlow(ref):
			z.slow, z.nextRemote = false, now+int64(remoteRefreshEvery)
		}
	}
	if z.slow {
		if now >= z.nextLocal {
			z.nextLocal = now + int64(localProbeEvery)
			return false
		}
		return true
	}
	if now >= z.nextRemote {
		z.nextRemote = now + int64(remoteRefreshEvery)
		return true
	}
	return false
}

// remoteRescanEvery: how often remoteBest looks at every remote endpoint.
const remoteRescanEvery = time.Second

// remoteBest is the latency rule's remote figure: the lowest typical RTT
// among the remote endpoints (0 while none is measured). The endpoint a
// pick draws may be a slow one of several (another region's); comparing
// with it would make the zone slow against the fast ones and not slow
// against it, pick after pick. Kept from the typical RTT rt of each
// remote endpoint picked, and taken again over every remote endpoint
// every remoteRescanEvery, so that it also rises when the best one slows
// down or leaves; and at every pick while it has no figure, so that the
// first remote answer counts at once, whichever remote endpoint the next
// picks draw (an unmeasured one's rt is 0).
func (z *zoneSplit) remoteBest(rt float64, now int64) float64 {
	if z.remoteBestRTT == 0 || now-z.remoteBestAt >= int64(remoteRescanEvery) {
		z.remoteBestRTT, z.remoteBestAt = 0, now
		for _, ep := range z.remoteEps {
			if v := ep.typical.Get(); v > 0 && (z.remoteBestRTT == 0 || v < z.remoteBestRTT) {
				z.remoteBestRTT = v
			}
		}
	}
	if rt > 0 && (z.remoteBestRTT == 0 || rt < z.remoteBestRTT) {
		z.remoteBestRTT = rt
	}
	return z.remoteBestRTT
}
