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
// byte and the moment requests began waiting). While it exceeds the
// endpoint's estimate, the endpoint is quiet: its cost counts the
// silence as its estimate, and P2C draws another pair rather than choose
// between two quiet ones. Past its silence limit — SilenceFactor × its
// estimate, at least SilenceFloor — it is unresponsive: P2C passes it
// over for a responsive one whatever their costs. A
// request that ends unanswered after waiting past the limit (its client
// gave up) is a peak sample and marks the endpoint down; it stays
// unresponsive after its requests drain, until a response byte arrives
// or its owner, having probed it, calls MarkResponsive, which restarts
// its estimate as a newcomer's. Connections
// (StartConn) are not requests and never make an endpoint silent.

import (
	"math"
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

// silence is the state of an endpoint's requests waiting for their first
// response byte. Every field is an atomic.
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
	if s.lastByte.Load() < now {
		s.lastByte.Store(now)
	}
	if s.down.Load() {
		s.down.Store(false)
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

// silenceLimit is the silence limit of an endpoint whose estimate is est
// (nanoseconds).
func silenceLimit(est float64) float64 {
	return max(float64(SilenceFloor), SilenceFactor*est)
}

// Unresponsive reports whether e is unresponsive at now: marked down, or
// silent past its limit. Unlike Cost it does not count as an update.
func (e *Endpoint) Unresponsive(now int64) bool {
	if e.silent.down.Load() {
		return true
	}
	quiet := e.silent.at(now)
	return quiet > 0 && float64(quiet) > silenceLimit(e.at(e.logEst.Load(), now))
}

// quiet reports whether e is down or silent longer than its estimate at
// now, without counting as an update.
func (e *Endpoint) quiet(now int64) bool {
	if e.silent.down.Load() {
		return true
	}
	silence := e.silent.at(now)
	return silence > 0 && float64(silence) > e.at(e.logEst.Load(), now)
}

// Silence returns how long requests have waited on e at now with no
// response byte (0 while none waits), for diagnostics.
func (e *Endpoint) Silence(now int64) time.Duration { return time.Duration(e.silent.at(now)) }

// Down reports whether a request ended unanswered past e's silence limit
// with no answer or MarkResponsive since.
func (e *Endpoint) Down() bool { return e.silent.down.Load() }

// MarkResponsive clears Down: the owner reached the endpoint (a probe
// connected). Its estimate starts again from rtt at now, as a newcomer's
// does (JoinRTT): the unanswered wait that marked it, a peak of seconds,
// would keep it out of every pair for a minute while it decays.
func (e *Endpoint) MarkResponsive(rtt time.Duration, now int64) {
	if rtt <= 0 {
		rtt = DefaultRTT
	}
	e.logEst.Store(math.Float64bits(math.Log(float64(rtt)) + float64(now-e.origin)*e.invDecay))
	e.touch(now)
	e.silent.down.Store(false)
}

// Unanswered reports that h's request ended at now with no response byte;
// call it before Done. When the request waited longer than its endpoint's
// silence limit, the wait is the endpoint's RTT sample (a peak: it is ten
// times the estimate) and the endpoint is marked down; true means this
// call marked it, and the caller should probe it. Nothing happens for an
// answered request or a connection.
func (h *Handle) Unanswered(now int64) bool {
	if h.ep == nil || !h.awaiting {
		return false
	}
	e := h.ep
	waited := float64(max(now-atomic.LoadInt64(&h.start), 0))
	if waited <= silenceLimit(e.at(e.logEst.Load(), now)) {
		return false
	}
	e.observe(waited, now)
	return e.silent.down.CompareAndSwap(false, true)
}
