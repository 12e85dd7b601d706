package balance

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"

	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
)

// Accrual is failure accrual (circuit breaking) over the endpoints of one
// balancer, as Linkerd's consecutive-failures accrual with a floor: it
// holds the config, the endpoints tracked and how many of them are out
// (ejected, or probing), which the floor bounds. Create it with
// NewAccrual, wrap each endpoint with Add, and pick among the Breakers
// with PickP2CAvailable.
type Accrual struct {
	cfg     accrual.Config
	members atomic.Int64 // Breakers added and not removed
	out     atomic.Int64 // of them not in: ejected or probing

	ejections, probes, restored, held atomic.Uint64
}

// NewAccrual returns the accrual of one balancer with config c.
func NewAccrual(c accrual.Config) (*Accrual, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return &Accrual{cfg: c}, nil
}

// Config returns the config in effect.
func (a *Accrual) Config() accrual.Config { return a.cfg }

// Add tracks e, counting it among the endpoints the floor is a share of,
// and returns its breaker. Call Remove when discovery removes it.
func (a *Accrual) Add(e *Endpoint) *Breaker {
	a.members.Add(1)
	return &Breaker{Endpoint: e, acc: a}
}

// AccrualStats are counters of an Accrual, for metrics.
type AccrualStats struct {
	Endpoints, Out int64 // tracked, and of them ejected or probing now
	// Ejections counts ejections and re-ejections after a failed probe;
	// Probes, probe requests sent; Restored, successful probes;
	// FloorHeld, failures that would have ejected but for the floor.
	Ejections, Probes, Restored, FloorHeld uint64
}

// Stats returns a's counters.
func (a *Accrual) Stats() AccrualStats {
	return AccrualStats{
		Endpoints: a.members.Load(), Out: a.out.Load(),
		Ejections: a.ejections.Load(), Probes: a.probes.Load(),
		Restored: a.restored.Load(), FloorHeld: a.held.Load(),
	}
}

// room reports whether one more endpoint may go out.
func (a *Accrual) room() bool { return a.out.Load() < a.cfg.MaxOut(a.members.Load()) }

// reserve counts one more endpoint out unless the floor forbids it.
func (a *Accrual) reserve() bool {
	limit := a.cfg.MaxOut(a.members.Load())
	for {
		o := a.out.Load()
		if o >= limit {
			return false
		}
		if a.out.CompareAndSwap(o, o+1) {
			return true
		}
	}
}

// The phases of a Breaker.
const (
	phaseIn      uint32 = iota // takes requests
	phaseEjected               // out until `until`, then its probe may be claimed
	phaseProbing               // probe claimed, its outcome awaited
	phaseRemoved               // no longer tracked
)

// Breaker is an Endpoint under failure accrual. It is safe for concurrent
// use. Its state machine, with N = ConsecutiveFailures:
//
//   - in: takes requests. Success zeroes the count of consecutive
//     failures; the N-th Failure in a row ejects it for Penalty(1) — unless
//     the floor is reached (MinHealthyPercent), and then it stays in and
//     each further failure tries again.
//   - ejected: takes no request until now reaches the end of the penalty;
//     then it is available for exactly one request, the probe, which
//     PickP2CAvailable claims atomically. Outcomes of requests placed
//     before the ejection are ignored, as Linkerd drains them.
//   - probing: the probe is in flight; it takes no request. The next
//     Success restores it (in, failures and penalty reset); the next
//     Failure ejects it again for Penalty(k+1), k the ejections since it
//     was last in. As in Linkerd, the next outcome is taken to be the
//     probe's: a request placed before the ejection and answered now
//     counts as the probe.
//
// Every outcome of a request placed on a Breaker must be reported once, by
// Success, Failure or, with no verdict (a cancelled request), Cancel: a
// probe never reported keeps its endpoint out.
//
// The hot path takes no lock and allocates nothing: Available and
// PickP2CAvailable read atomics, Success in the in phase is a load (and a
// store after failures), Failure below N an add. Transitions take a
// per-endpoint mutex.
type Breaker struct {
	*Endpoint
	acc      *Accrual
	phase    atomic.Uint32
	until    atomic.Int64 // end of the penalty, while ejected
	failures atomic.Int64 // consecutive failures, while in

	mu        sync.Mutex // serializes transitions
	ejections int        // in a row since last in, under mu
}

// Available reports whether b may be picked at now: it is in, or its
// penalty is over and its probe not yet claimed. It claims nothing.
func (b *Breaker) Available(now int64) bool {
	switch b.phase.Load() {
	case phaseIn:
		return true
	case phaseEjected:
		return now >= b.until.Load()
	}
	return false
}

// take places one request on b at now if it is available, claiming the
// probe if that is what it is available for: of concurrent callers one
// gets the probe.
func (b *Breaker) take(now int64) bool {
	switch b.phase.Load() {
	case phaseIn:
		return true
	case phaseEjected:
		// From ejected only a claim or Remove moves it, so until is the
		// one of this ejection.
		if now >= b.until.Load() && b.phase.CompareAndSwap(phaseEjected, phaseProbing) {
			b.acc.probes.Add(1)
			return true
		}
	}
	return false
}

// Success reports a request on b that succeeded at now.
func (b *Breaker) Success(now int64) {
	switch b.phase.Load() {
	case phaseIn:
		if b.failures.Load() != 0 {
			b.failures.Store(0)
		}
	case phaseProbing:
		b.mu.Lock()
		if b.phase.Load() == phaseProbing {
			b.failures.Store(0)
			b.ejections = 0
			b.phase.Store(phaseIn)
			b.acc.out.Add(-1)
			b.acc.restored.Add(1)
		}
		b.mu.Unlock()
	}
}

// Failure reports a request on b that failed at now (see
// IsFailureStatus); rnd, a uniformly random word, draws the jitter of a
// penalty it starts.
func (b *Breaker) Failure(now int64, rnd uint64) {
	a := b.acc
	if b.phase.Load() == phaseIn {
		if b.failures.Add(1) < int64(a.cfg.ConsecutiveFailures) {
			return
		}
		if !a.room() {
			a.held.Add(1)
			return
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.phase.Load() {
	case phaseIn:
		if b.failures.Load() < int64(a.cfg.ConsecutiveFailures) {
			return // a success came in between
		}
		if !a.reserve() {
			a.held.Add(1)
			return
		}
		b.ejections = 1
	case phaseProbing:
		b.ejections = min(b.ejections+1, 64) // the penalty is capped long before
	default:
		return // ejected: a request placed before; removed
	}
	b.until.Store(now + int64(a.cfg.Penalty(b.ejections, rnd)))
	b.phase.Store(phaseEjected)
	a.ejections.Add(1)
}

// Cancel reports a request on b that ended with no verdict (cancelled by
// its client): if a probe is in flight, another request may be the probe.
func (b *Breaker) Cancel() {
	if b.phase.Load() != phaseProbing {
		return
	}
	b.mu.Lock()
	b.phase.CompareAndSwap(phaseProbing, phaseEjected) // until is past
	b.mu.Unlock()
}

// Claimed reports whether b's probe is claimed: right after a pick
// returned b, that the pick claimed it.
func (b *Breaker) Claimed() bool { return b.phase.Load() == phaseProbing }

// Unclaim undoes the claim of b's probe by a pick whose request went to
// another endpoint (a zone-aware pick picks on both sides and places the
// request on one): b is available for its probe again, and no probe is
// counted. Call it only for a Breaker the same pick returned, before any
// request is placed on it; otherwise a probe in flight would be undone.
func (b *Breaker) Unclaim() {
	b.mu.Lock()
	if b.phase.CompareAndSwap(phaseProbing, phaseEjected) { // until is past
		b.acc.probes.Add(^uint64(0))
	}
	b.mu.Unlock()
}

// Remove stops tracking b (discovery removed it): it no longer counts
// toward the floor, is never available and ignores outcomes. Calls after
// the first are ignored.
func (b *Breaker) Remove() {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.phase.Swap(phaseRemoved) {
	case phaseRemoved:
		return
	case phaseEjected, phaseProbing:
		b.acc.out.Add(-1)
	}
	b.acc.members.Add(-1)
}

// BreakerState is a Breaker's state, for diagnostics and metrics
// (outbound_http_balancer_endpoints counts all but Ready and Probing as
// pending).
type BreakerState uint8

const (
	StateReady         BreakerState = iota // in
	StateEjected                           // penalty running
	StateProbing                           // penalty over, probe not yet sent
	StateProbeInFlight                     // probe sent, outcome awaited
	StateRemoved
)

func (s BreakerState) String() string {
	switch s {
	case StateReady:
		return "ready"
	case StateEjected:
		return "ejected"
	case StateProbing:
		return "probing"
	case StateProbeInFlight:
		return "probe-in-flight"
	case StateRemoved:
		return "removed"
	}
	return fmt.Sprintf("BreakerState(%d)", uint8(s))
}

// State returns b's state at now.
func (b *Breaker) State(now int64) BreakerState {
	switch b.phase.Load() {
	case phaseIn:
		return StateReady
	case phaseEjected:
		if now >= b.until.Load() {
			return StateProbing
		}
		return StateEjected
	case phaseProbing:
		return StateProbeInFlight
	}
	return StateRemoved
}

// ConsecutiveFailures returns the failures in a row counted while in.
func (b *Breaker) ConsecutiveFailures() int64 { return b.failures.Load() }

// PenaltyEnd returns when the current penalty ends (monotonic
// nanoseconds) if b is ejected.
func (b *Breaker) PenaltyEnd() (int64, bool) {
	if b.phase.Load() != phaseEjected {
		return 0, false
	}
	return b.until.Load(), true
}

// CountAvailable returns how many of bs are Available at now.
func CountAvailable(bs []*Breaker, now int64) int {
	n := 0
	for _, b := range bs {
		if b.Available(now) {
			n++
		}
	}
	return n
}

// pickTries is how many pairs PickP2CAvailable draws before it scans.
// With a share f of endpoints out a pair is all out with probability f²,
// so with f ≤ ½ (the default floor) it scans in under 0.4 % of picks.
const pickTries = 4

// PickP2CAvailable is PickP2C over the available endpoints of bs: it draws
// pairs of distinct endpoints with rnd (re-mixed for each pair), and
// returns the better available one as pickPair says (a due probe first,
// then as IndexP2C: responsive first, the lower Cost at now, a tie within
// 1 % broken at random), claiming its probe if it is probing (if another
// caller won that claim, the other of the pair); a pair of two quiet ones
// is drawn again, up to Redraws times, as IndexP2C does (silence.go).
// After pickTries pairs with none available it scans bs once from
// a random place and takes the better of the first two available. When
// none is and more endpoints are out than the floor allows of those left
// (the set shrank), the earliest ejected one gets its probe now. nil
// means none is available (with a floor above 0, only while a probe is
// in flight). Place the request on the result
// with Start and report its outcome with Success, Failure or Cancel. It
// allocates nothing.
func PickP2CAvailable(bs []*Breaker, now int64, rnd uint64) *Breaker {
	if i := IndexP2CAvailable(bs, now, rnd); i >= 0 {
		return bs[i]
	}
	return nil
}

// IndexP2CAvailable is PickP2CAvailable returning the index in bs (-1 for
// none), for callers that keep their own state beside each Breaker.
func IndexP2CAvailable(bs []*Breaker, now int64, rnd uint64) int {
	n := uint64(len(bs))
	switch n {
	case 0:
		return -1
	case 1:
		if bs[0].take(now) {
			return 0
		}
		return forceProbe(bs)
	}
	for tries, redraws := 0, 0; tries < pickTries; {
		i := (rnd & math.MaxUint32) * n >> 32
		j := (rnd >> 32) * (n - 1) >> 32
		if j >= i {
			j++
		}
		if n > 2 && redraws < Redraws && bs[i].quiet(now) && bs[j].quiet(now) {
			redraws++ // both quiet: another pair, as IndexP2C
			rnd = mix(rnd)
			continue
		}
		tries++
		if k := pickPair(bs, int(i), int(j), now, mix(rnd)); k >= 0 {
			return k
		}
		rnd = mix(rnd)
	}
	i := int((rnd & math.MaxUint32) * n >> 32)
	first := -1
	for range n {
		if bs[i].Available(now) {
			if first < 0 {
				first = i
			} else if k := pickPair(bs, first, i, now, mix(rnd)); k >= 0 {
				return k
			} else {
				first = -1 // both claimed by others meanwhile
			}
		}
		if i++; i == int(n) {
			i = 0
		}
	}
	if first >= 0 && bs[first].take(now) {
		return first
	}
	return forceProbe(bs)
}

// forceProbe keeps the floor after the set shrank: when more endpoints
// are out than the floor allows of those left (discovery removed some
// that were in), the ejected one whose penalty ends first gets its probe
// now. Its index, or -1.
func forceProbe(bs []*Breaker) int {
	a := bs[0].acc
	if a.out.Load() <= a.cfg.MaxOut(a.members.Load()) {
		return -1
	}
	best := -1
	for i, b := range bs {
		if b.phase.Load() == phaseEjected && (best < 0 || b.until.Load() < bs[best].until.Load()) {
			best = i
		}
	}
	if best >= 0 && bs[best].phase.CompareAndSwap(phaseEjected, phaseProbing) {
		a.probes.Add(1)
		return best
	}
	return -1
}

// pickPair returns the index of the one of bs[i] and bs[j] to place a
// request on at now, taken, or the other if it cannot be taken, or -1
// when neither is available. Of two available: a due probe first (it is
// the way back of an ejected endpoint, and its estimate, unrefreshed
// while it was out, must not postpone it); then, as IndexP2C, a
// responsive one before an unresponsive one (silence.go), the lower
// cost, and rnd's lowest bit between costs within 1 %.
func pickPair(bs []*Breaker, i, j int, now int64, rnd uint64) int {
	switch iok, jok := bs[i].Available(now), bs[j].Available(now); {
	case iok && jok:
		if better(bs[j], bs[i], now, rnd) {
			i, j = j, i
		}
	case iok:
		j = -1
	case jok:
		i, j = j, -1
	default:
		return -1
	}
	if bs[i].take(now) {
		return i
	}
	if j >= 0 && bs[j].take(now) {
		return j
	}
	return -1
}

// better reports whether b should take a request before a, both
// available at now (see pickPair).
func better(b, a *Breaker, now int64, rnd uint64) bool {
	if pa, pb := a.phase.Load() == phaseEjected, b.phase.Load() == phaseEjected; pa != pb {
		return pb
	}
	ca, _, sa := a.load(now)
	cb, _, sb := b.load(now)
	switch {
	case sb != sa:
		return sb < sa
	case cb < ca*0.99:
		return true
	case ca < cb*0.99:
		return false
	}
	return rnd&1 == 1
}

// mix is splitmix64's step: a new random word from rnd.
func mix(rnd uint64) uint64 {
	z := rnd + 0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}
