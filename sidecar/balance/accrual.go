package balance

import (
	"fmt"
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

// Success reports a request on b that succeeded at now; restored says
// that it was the probe, and b is in again.
func (b *Breaker) Success(now int64) (restored bool) {
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
			restored = true
		}
		b.mu.Unlock()
	}
	return restored
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
