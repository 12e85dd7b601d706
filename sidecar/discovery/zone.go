package discovery

// Zone-aware balancing, on when the parent Service asks for it (the
// policy's ZoneAware, routes.Backend.LocalZone): a request goes to an
// endpoint in the proxy's own zone — the best of two local ones, as
// peak-EWMA P2C picks — unless none is available there, or the best of
// two elsewhere costs less than that one by more than SpillRatio. Cost is
// the estimate times the requests pending (balance.Endpoint.Cost), so
// traffic spills when the local endpoints are slower (latency) or busier
// (load) than the others, not only when they are gone, and returns as
// their estimates come back down. With failure accrual on, ejected local
// endpoints are not available: failures spill too.

import (
	"math/rand/v2"
	"sync/atomic"

	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// SpillRatio: a request leaves its zone when the best local endpoint's
// cost is above SpillRatio times the best remote one's. An endpoint that
// takes no requests sees its estimate decay (τ = 10 s), so a remote
// endpoint is tried about every τ·ln(SpillRatio) ≈ 7 s when the local
// ones are as fast: its estimate stays fresh, at well under 5 % of the
// requests at any rate above one a second.
const SpillRatio = 2.0

// zoneSplit is the zone split of a sub's pickable endpoints (under the
// sub's lock). Rebuilt with them; nothing while zone is "".
type zoneSplit struct {
	zone                string // the proxy's zone; "": zone-aware balancing off
	local, remote       []int  // indices into pickable
	localLbs, remoteLbs []*balance.Endpoint
	localBrs, remoteBrs []*balance.Breaker // with failure accrual
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
	z.local, z.remote, z.localLbs, z.remoteLbs, z.localBrs, z.remoteBrs = nil, nil, nil, nil, nil, nil
	if z.zone == "" {
		return
	}
	for i, ep := range pickable {
		if ep.Labels["zone"] == z.zone {
			z.local = append(z.local, i)
			z.localLbs = append(z.localLbs, lbs[i])
			if brs != nil {
				z.localBrs = append(z.localBrs, brs[i])
			}
		} else {
			z.remote = append(z.remote, i)
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
	switch {
	case li < 0 && ri < 0:
		return -1, false
	case li < 0 || ri >= 0 && z.spill(z.localLbs[li], z.remoteLbs[ri], now):
		z.remotePicks.Add(1)
		return z.remote[ri], true
	}
	z.localPicks.Add(1)
	return z.local[li], true
}

// spill reports whether a request should go to the remote endpoint rather
// than the local one: the local one is unresponsive and the remote one
// not (balance/silence.go), or, both or neither being so, the remote one
// costs less by SpillRatio.
func (z *zoneSplit) spill(local, remote *balance.Endpoint, now int64) bool {
	if lu, ru := local.Unresponsive(now), remote.Unresponsive(now); lu != ru {
		return lu
	}
	return remote.Cost(now)*SpillRatio < local.Cost(now)
}
