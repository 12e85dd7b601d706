// Package balance chooses the endpoint for each request or connection:
// peak-EWMA power of two choices over per-endpoint latency and load for
// HTTP (Linkerd's balancer), and least-loaded power of two choices for
// opaque TCP. It keeps no clock and does no I/O: every call takes the time
// as monotonic nanoseconds, so callers pass a real clock and tests a
// simulated one.
package balance

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Defaults of Config, as Linkerd's (ARCHITECTURE.md §8).
const (
	DefaultRTT   = 30 * time.Millisecond
	DefaultDecay = 10 * time.Second
)

// Config is the peak-EWMA configuration shared by a balancer's endpoints.
// Zero fields take the defaults.
type Config struct {
	// DefaultRTT is the estimate of an endpoint before its first sample
	// (a prior, estimate.go); 0 is the default, DefaultRTT.
	DefaultRTT time.Duration
	// Decay is τ, the time constant with which the estimate decays.
	Decay time.Duration
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	switch {
	case c.DefaultRTT < 0:
		return fmt.Errorf("balance: default RTT %s must not be negative", c.DefaultRTT)
	case c.Decay < 0:
		return fmt.Errorf("balance: decay %s must not be negative", c.Decay)
	}
	return nil
}

// Endpoint is the balancing state of one endpoint: requests pending, the
// peak-EWMA RTT estimate and the weight. It is safe for concurrent use and
// takes no lock: every field is an atomic. Create it with NewEndpoint.
//
// The estimate is estimate.go's.
type Endpoint struct {
	pending  atomic.Int64
	silent   silence       // requests waiting for their first byte (silence.go)
	logEst   atomic.Uint64 // float64 bits of x (estimate.go)
	updated  atomic.Int64  // u: the last read or sample
	fresh    atomic.Bool   // a prior with no request placed since: costs 0
	placed   atomic.Int64  // when the last request was placed (Start)
	weight   atomic.Uint32
	typical  Typical // of every sample: whether two endpoints answer alike (AlikeRTT)
	origin   int64
	invDecay float64 // 1/τ, per nanosecond
}

// NewEndpoint returns an endpoint with weight (0 means 1) whose estimate
// is c.DefaultRTT at now.
func NewEndpoint(c Config, weight uint32, now int64) *Endpoint {
	decay := c.Decay
	if decay <= 0 {
		decay = DefaultDecay
	}
	e := &Endpoint{origin: now, invDecay: 1 / float64(decay)}
	e.placed.Store(now)
	e.setPrior(c.DefaultRTT, now)
	e.weight.Store(weight)
	return e
}

// JoinRTT is the starting estimate (Config.DefaultRTT) for an endpoint
// that joins eps at now: the lowest estimate among them, or 0 when eps is
// empty (nothing is known: the default, which the first sample replaces;
// estimate.go). A newcomer costs 0 until its first request is placed; in
// between, and when that request gives no sample (it failed), it is
// compared by this prior, into which its samples then mix as any
// endpoint's. Had it the default 30 ms against endpoints answering in
// 1 ms, it would win no pair until that decayed (τ·ln 30 ≈ 34 s).
func JoinRTT(eps []*Endpoint, now int64) time.Duration {
	if len(eps) == 0 {
		return 0
	}
	best := eps[0].Estimate(now)
	for _, e := range eps[1:] {
		best = min(best, e.Estimate(now))
	}
	return max(best, 1) // 0 would mean DefaultRTT to NewEndpoint
}

// SetWeight changes the weight (0 means 1), as discovery updates it.
func (e *Endpoint) SetWeight(w uint32) { e.weight.Store(w) }

// Weight returns the weight in effect (at least 1).
func (e *Endpoint) Weight() uint32 { return max(e.weight.Load(), 1) }

// Typical returns the typical RTT in nanoseconds (Typical), 0 before the
// first answer.
func (e *Endpoint) Typical() float64 { return e.typical.Get() }

// Pending returns the requests started and not yet Done.
func (e *Endpoint) Pending() int64 { return e.pending.Load() }

// Estimate returns the RTT estimate at now, for diagnostics: unlike Cost it
// does not count as an update.
func (e *Endpoint) Estimate(now int64) time.Duration {
	return time.Duration(e.estimate(now))
}

// Cost is Linkerd's load of the endpoint at now, estimate × (pending + 1)
// / weight, in nanoseconds: pending are the requests in flight, the 1 the
// request being placed. Like tower's load it counts as an update of the
// estimate (estimate.go). An endpoint no request was placed on since its
// prior was set costs 0: it is measured first; so does one no request
// was placed on for Remeasure (estimate.go; in a pair, only while the
// other had requests: remeasured).
//
// While requests wait on e with no response byte for longer than its
// estimate (silence.go), the estimate counts as that wait: an endpoint
// that stopped answering costs more with every moment, not after its
// requests give up.
func (e *Endpoint) Cost(now int64) float64 {
	r, _, stale := e.read(now)
	if stale {
		return 0
	}
	return r.cost()
}

// reading is an endpoint's state at a pick, as a pair compares it.
type reading struct {
	rtt     float64 // ns: the estimate, or the silence it is in when longer; 0: measure it first
	typical float64 // ns: Typical; 0: no sample yet
	load    float64 // (pending + 1) / weight
	st      standing
}

// cost is Cost from a reading.
func (r reading) cost() float64 { return r.rtt * r.load }

// read is the endpoint at now with its silence (silence.go): quiet,
// silent longer than its estimate (or down), and its standing, which
// orders a pair before the costs do; and stale, no request placed on it
// for Remeasure, whose cost a pair decides (remeasured). One reading of
// the estimate.
func (e *Endpoint) read(now int64) (r reading, quiet, stale bool) {
	e.touch(now)
	est := e.estimate(now)
	silence := float64(e.silent.at(now))
	r.st = e.silent.standing(silence, est)
	r.load = float64(e.pending.Load()+1) / float64(e.Weight())
	r.typical = e.typical.Get()
	quiet = r.st != responsive || silence > est
	if e.fresh.Load() {
		return r, quiet, false
	}
	r.rtt = max(est, silence)
	return r, quiet, now-e.placed.Load() >= int64(Remeasure)
}

// remeasured gives the readings a pair is compared by: a stale endpoint
// costs 0 when the other had a request placed within Remeasure (traffic
// flows and passes it over: it is measured anew); when both are stale,
// requests are too rare to pass anyone over, and their estimates decide
// (estimate.go).
func remeasured(a reading, staleA bool, b reading, staleB bool) (reading, reading) {
	switch {
	case staleA && !staleB:
		a.rtt = 0
	case staleB && !staleA:
		b.rtt = 0
	}
	return a, b
}

// Handle is one request placed on an endpoint. Keep it in a variable and
// call its methods on that variable (they take a pointer so that repeats
// are ignored); do not copy it.
type Handle struct {
	ep       *Endpoint
	start    int64 // read and written atomically: Connected may come from a dialer's goroutine
	observed bool
	awaiting bool // a request waiting for its first byte (not a connection)
}

// Start counts a request as pending on e from now, waiting for its first
// response byte (Observe).
func (e *Endpoint) Start(now int64) Handle {
	e.pending.Add(1)
	if e.fresh.Load() {
		e.fresh.Store(false)
	}
	if now-e.placed.Swap(now) >= int64(Remeasure) {
		e.remeasure()
	}
	e.silent.begin(now)
	return Handle{ep: e, start: now, awaiting: true}
}

// StartConn counts an opaque connection as pending on e: it has no
// response to wait for, so it never makes e silent.
func (e *Endpoint) StartConn(now int64) Handle {
	e.pending.Add(1)
	return Handle{ep: e, start: now}
}

// Observe records now − start as an RTT sample: call it at the first
// response byte. Calls after the first, or after Done, are ignored.
// (linkerd2-proxy samples at the first response data frame and also when
// the response ends or fails before one; a request that fails here without
// Observe gives no sample.) It returns the sample, and false when the
// call was ignored.
func (h *Handle) Observe(now int64) (rtt time.Duration, ok bool) {
	if h.ep == nil || h.observed {
		return 0, false
	}
	h.observed = true
	rtt = time.Duration(max(now-atomic.LoadInt64(&h.start), 0))
	h.ep.observe(float64(rtt), now)
	h.ep.typical.Observe(rtt)
	if h.awaiting {
		h.awaiting = false
		h.ep.silent.answered(now)
	}
	return rtt, true
}

// Waiting reports whether h is a request still waiting for its first
// byte (not a connection, not Observed, not Done).
func (h *Handle) Waiting() bool { return h.ep != nil && h.awaiting }

// Connected says the connection the request waits for is established at
// now: the RTT sample starts there instead of at Start. A new connection
// costs a handshake (mesh TLS to a pod that has just started, on a busy
// node tens of milliseconds) that no later request on it pays; counted,
// it would be the endpoint's peak, and a newcomer or a rejoining
// endpoint would win no pick until it decayed (seconds). linkerd2-proxy
// excludes it too: its balancer picks among endpoints whose connection is
// ready. Safe to call from another goroutine than the request's.
func (h *Handle) Connected(now int64) {
	for {
		old := atomic.LoadInt64(&h.start)
		if now <= old || atomic.CompareAndSwapInt64(&h.start, old, now) {
			return
		}
	}
}

// Done ends the request: it is no longer pending. Calls after the first
// are ignored. (linkerd2-proxy stops counting a request at its first
// response data frame; calling Done with Observe reproduces that, calling
// it at the end of the response counts streams for their whole life.)
func (h *Handle) Done() {
	if h.ep != nil {
		if h.awaiting {
			h.awaiting = false
			h.ep.silent.end()
		}
		h.ep.pending.Add(-1)
		h.ep = nil
	}
}

// PickP2C is peak-EWMA power of two choices: of two distinct endpoints
// drawn from eps with rnd, the one of lower Cost at now (either on a tie).
// One endpoint is returned as is, none gives nil. It reads two endpoints
// and allocates nothing.
func PickP2C(eps []*Endpoint, now int64, rnd uint64) *Endpoint {
	if i := IndexP2C(eps, now, rnd); i >= 0 {
		return eps[i]
	}
	return nil
}

// IndexP2C is PickP2C returning the index in eps (-1 for none), for
// callers that keep their own state beside each Endpoint.
//
// Endpoints whose RTTs are alike (AlikeRTT) are compared by load alone,
// and costs within 1 % of each other are a tie, broken by rnd's lowest
// bit: endpoints that answer alike share the picks instead of the one a
// little faster taking them all.
//
// An unresponsive endpoint (silence.go) loses to a responsive one, and
// one marked down to both, whatever their costs; when both drawn are
// quiet (silent longer than their estimates) it draws another pair, up to
// Redraws times, and then compares the last pair.
func IndexP2C(eps []*Endpoint, now int64, rnd uint64) int {
	i, j := twoIndex(len(eps), rnd)
	if j < 0 {
		return i
	}
	for try := 0; ; try++ {
		ri, qi, xi := eps[i].read(now)
		rj, qj, xj := eps[j].read(now)
		ri, rj = remeasured(ri, xi, rj, xj)
		switch {
		case qi && qj && try < Redraws && len(eps) > 2:
			rnd = mix(rnd)
			i, j = twoIndex(len(eps), rnd)
			continue
		case beats(rj, ri, rnd):
			return j
		}
		return i
	}
}

// beats reports whether an endpoint read as b should take a request
// before one read as a: the better standing first (silence.go), then the
// lower cost, or the lower load when both answer in time and typically
// alike (AlikeRTT); values within 1 % of each other are a tie, broken by
// rnd's lowest bit.
func beats(b, a reading, rnd uint64) bool {
	if b.st != a.st {
		return b.st < a.st
	}
	vb, va := b.cost(), a.cost()
	if b.rtt > 0 && a.rtt > 0 && alike(b.typical, a.typical) {
		vb, va = b.load, a.load
	}
	switch {
	case vb < va*0.99:
		return true
	case va < vb*0.99:
		return false
	}
	return rnd&1 == 1
}

// AlikeRTT is how many times slower one endpoint's typical RTT
// (Typical) may be than another's and still count as alike, leaving
// their loads to decide. The peak-EWMA estimate, which decides
// otherwise, is its endpoint's latest peak, decaying for seconds: equal
// replicas on a busy machine took turns being 2–3× apart by their last
// hiccup alone (estimates of 2 to 17 ms for a p50 of 1.7 ms), and
// whichever had the quieter seconds took most of the picks (one of two
// clusters of equal replicas took 64–72 %; TestMulticluster's federated
// split). A typical RTT, averaged over a few answers, is steadier, yet
// still wanders by a tenth or more at these latencies: hence a factor,
// not a few percent; and below a millisecond, where a node's scheduling
// noise is as large as the RTT, within AlikeMargin too (typical RTTs of
// 0.4 to 1.9 ms for four equal replicas). A replica typically 1.5× and
// AlikeMargin slower or more is compared by its estimate, and one answer
// 10× slower moves its typical RTT by 60 %: from about 1 ms up it is
// passed over from that answer on, below from the next
// (TestP2CAvoidsSlowEndpoint, TestP2CSlowThenRecovered).
const (
	AlikeRTT    = 1.5
	AlikeMargin = 500 * time.Microsecond
)

// alike reports whether typical RTTs x and y, both measured, are within
// a factor AlikeRTT or AlikeMargin of each other.
func alike(x, y float64) bool {
	return x > 0 && y > 0 && (x < y*AlikeRTT && y < x*AlikeRTT || math.Abs(x-y) < float64(AlikeMargin))
}

// PickLeastLoaded is power of two choices by pending requests (opaque
// connections) over weight: of two distinct endpoints drawn with rnd, the
// one not marked down (MarkDown, Unanswered) over one that is, then the
// one of lower (pending + 1) / weight. When both drawn are down it draws
// another pair, up to Redraws times, as IndexP2C does: with two of three
// endpoints down, a third of the pairs would otherwise hold no other.
func PickLeastLoaded(eps []*Endpoint, rnd uint64) *Endpoint {
	if i := IndexLeastLoaded(eps, rnd); i >= 0 {
		return eps[i]
	}
	return nil
}

// IndexLeastLoaded is PickLeastLoaded returning the index (-1 for none).
func IndexLeastLoaded(eps []*Endpoint, rnd uint64) int {
	i, j := twoIndex(len(eps), rnd)
	if j < 0 {
		return i
	}
	for try := 0; ; try++ {
		a, b := eps[i], eps[j]
		da, db := a.Down(), b.Down()
		switch {
		case da && db && try < Redraws && len(eps) > 2:
			rnd = mix(rnd)
			i, j = twoIndex(len(eps), rnd)
			continue
		case da != db:
			if da {
				return j
			}
			return i
		case (b.pending.Load()+1)*int64(a.Weight()) < (a.pending.Load()+1)*int64(b.Weight()):
			return j
		}
		return i
	}
}

// twoIndex draws two distinct indices below n as two does; j is -1 when
// n < 2, both are -1 when n is 0.
func twoIndex(n int, rnd uint64) (i, j int) {
	switch n {
	case 0:
		return -1, -1
	case 1:
		return 0, -1
	}
	u := uint64(n)
	a := (rnd & math.MaxUint32) * u >> 32
	b := (rnd >> 32) * (u - 1) >> 32
	if b >= a {
		b++
	}
	return int(a), int(b)
}

// two draws two distinct endpoints, the first from the low 32 bits of rnd
// and the second from the high ones (multiply-shift, no division); b is
// nil when eps has fewer than two.
func two(eps []*Endpoint, rnd uint64) (a, b *Endpoint) {
	i, j := twoIndex(len(eps), rnd)
	if i >= 0 {
		a = eps[i]
	}
	if j >= 0 {
		b = eps[j]
	}
	return a, b
}
