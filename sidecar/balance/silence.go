package balance

// Unresponsive endpoints. A node that loses power or its network answers
// nothing: no reset, no ICMP. Requests sent to its pods wait until their
// clients give up, and peak EWMA alone never learns of it — such a
// request yields no sample, so the estimate of a dead endpoint decays
// toward zero and, in a pair drawn with another dead one, one of them is
// always picked (a sixth of all requests with two dead endpoints of
// four). Kubernetes takes the endpoints out only when the node controller
// gives up on the node, about 50 s later.
//
// So every endpoint tracks its silence: how long requests have waited on
// it with no response byte arriving (from the later of the last first
// byte and the moment requests began waiting). Silent longer than its
// estimate, the endpoint is quiet: its cost counts the silence as its
// estimate, and P2C draws another pair rather than choose between two
// quiet ones. Silent past its limit — SilenceFactor × its estimate, at
// least SilenceFloor — with at least two requests waiting, it is
// unresponsive: P2C passes it over for a responsive one whatever their
// costs. (One request may rightly wait long — a long poll, a stream whose
// headers come late — so one alone only makes the endpoint quiet.)
//
// A request that ends unanswered past the limit (its client gave up, a
// timeout fired), with no response byte from the endpoint since it
// started, marks the endpoint down: it then loses to every endpoint not
// down, also after its requests drain, until a response byte arrives or
// its owner, having probed it, calls MarkResponsive, which restarts its
// estimate as a newcomer's. An endpoint that answered other requests
// meanwhile is slow for that one request, not gone: it is not marked.
// Connections (StartConn) are not requests and never make an endpoint
// silent.

import (
	"sync/atomic"
	"time"
)

// Silence limits and how hard P2C looks for a responsive endpoint.
const (
	// SilenceFloor is the least silence that makes an endpoint
	// unresponsive.
	SilenceFloor = 100 * time.Millisecond
	// SilenceFactor × the endpoint's estimate is its silence limit when
	// above the floor: peak EWMA tracks the peaks, so a healthy but slow
	// endpoint stays well inside it.
	SilenceFactor = 10
	// Redraws is how many more pairs P2C draws when both of a pair are
	// quiet: with half of four endpoints dead, all nine pairs are dead
	// ones about once in ten million picks.
	Redraws = 8
)

// standing orders endpoints before their costs do: a responsive one wins
// over an unresponsive one, and both over one marked down.
type standing uint8

const (
	responsive standing = iota
	unresponsive
	markedDown
)

// silence is the state of an endpoint's requests waiting for their first
// response byte. Every field is an atomic; since is written just after
// waiting rises from 0, so a reader racing with that may see the
// previous wait's since for a moment (standing needs two requests
// waiting, so that alone never makes an endpoint unresponsive).
type silence struct {
	waiting  atomic.Int64 // requests started, neither answered nor done
	since    atomic.Int64 // when waiting last rose from 0
	lastByte atomic.Int64 // when a request's first byte last arrived
	down     atomic.Bool  // marked by Unanswered, cleared by an answer or MarkResponsive
}

// begin counts a request waiting from now.
func (s *silence) begin(now int64) {
	if s.waiting.Add(1) == 1 {
		s.since.Store(now)
	}
}

// answered ends a wait with a response byte at now: the endpoint is alive.
func (s *silence) answered(now int64) {
	s.waiting.Add(-1)
	s.heard(now)
	if s.down.Load() {
		s.down.Store(false)
	}
}

// heard moves lastByte forward to now (never back: answers race).
func (s *silence) heard(now int64) {
	for {
		last := s.lastByte.Load()
		if last >= now || s.lastByte.CompareAndSwap(last, now) {
			return
		}
	}
}

// end ends a wait without an answer.
func (s *silence) end() { s.waiting.Add(-1) }

// at is the silence at now in nanoseconds: 0 while no request waits.
func (s *silence) at(now int64) int64 {
	if s.waiting.Load() <= 0 {
		return 0
	}
	return max(now-max(s.since.Load(), s.lastByte.Load()), 0)
}

// standing is the endpoint's standing given its silence and estimate
// (nanoseconds).
func (s *silence) standing(silence, est float64) standing {
	switch {
	case s.down.Load():
		return markedDown
	case silence > silenceLimit(est) && s.waiting.Load() >= 2:
		return unresponsive
	}
	return responsive
}

// silenceLimit is the silence limit of an endpoint whose estimate is est
// (nanoseconds).
func silenceLimit(est float64) float64 {
	return max(float64(SilenceFloor), SilenceFactor*est)
}

// Unresponsive reports whether e is unresponsive or marked down at now.
// Unlike Cost it does not count as an update.
func (e *Endpoint) Unresponsive(now int64) bool {
	if e.silent.down.Load() {
		return true
	}
	silence := e.silent.at(now)
	return silence > 0 && e.silent.standing(float64(silence), e.estimate(now)) != responsive
}

// quiet reports whether e is down or silent longer than its estimate at
// now, without counting as an update.
func (e *Endpoint) quiet(now int64) bool {
	if e.silent.down.Load() {
		return true
	}
	silence := e.silent.at(now)
	return silence > 0 && float64(silence) > e.estimate(now)
}

// Silence returns how long requests have waited on e at now with no
// response byte (0 while none waits), for diagnostics.
func (e *Endpoint) Silence(now int64) time.Duration { return time.Duration(e.silent.at(now)) }

// Down reports whether a request ended unanswered past e's silence limit
// with no answer or MarkResponsive since.
func (e *Endpoint) Down() bool { return e.silent.down.Load() }

// MarkDown marks e down: a connection to it failed (refused, unreachable,
// timed out). It then loses every pair to an endpoint not down until it
// answers or MarkResponsive; true means this call marked it.
func (e *Endpoint) MarkDown() bool { return e.silent.down.CompareAndSwap(false, true) }

// MarkResponsive clears Down: the owner reached the endpoint (a probe
// connected). Its estimate starts again from rtt at now, as a newcomer's
// does (JoinRTT over the others): it had no sample while it was down.
func (e *Endpoint) MarkResponsive(rtt time.Duration, now int64) {
	e.setPrior(rtt, now)
	e.silent.heard(now) // requests from before the rejoin do not mark it again
	e.silent.down.Store(false)
}

// Unanswered reports that h's request ended at now with no response byte;
// call it before Done. When the request waited longer than its endpoint's
// silence limit and no response byte came from the endpoint since it
// started, the endpoint is marked down; true means this call marked it,
// and the caller should probe it. Nothing happens for an answered request
// or a connection. The wait is no RTT sample: it measured the client's
// patience, not the endpoint.
func (h *Handle) Unanswered(now int64) bool {
	if h.ep == nil || !h.awaiting {
		return false
	}
	e := h.ep
	start := atomic.LoadInt64(&h.start)
	if float64(now-start) <= silenceLimit(e.estimate(now)) || e.silent.lastByte.Load() > start {
		return false
	}
	return e.silent.down.CompareAndSwap(false, true)
}
