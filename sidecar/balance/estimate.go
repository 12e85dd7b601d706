package balance

import (
	"math"
	"time"
)

// The RTT estimate of an Endpoint is tower's PeakEwma
// (tower/src/load/peak_ewma.rs), the one linkerd2-proxy balances HTTP
// with, but for its start. The state is an estimate E as of the time u of
// its last update, where reading the cost counts as an update. With τ the
// decay and w = exp(-(t-u)/τ):
//
//   - reading the cost at t (tower's load) decays E toward 0:
//     E ← E·w, u ← t;
//   - a sample s (the RTT of a request) at t: if E < s, the peak, E ← s;
//     else E ← E·w + s·(1−w), an average weighted toward s by the time
//     since the last update; then u ← t.
//
// A sample arrives an RTT after the pick that read its endpoint, so one
// below the estimate barely lowers it: the estimate is in effect the
// decayed peak of recent samples, and a picked endpoint's hovers near
// the top of its latency's spread. That spread keeps endpoints that answer
// alike taking turns at low load. (An average that settles at each
// endpoint's mean would give every pick to the one a hair faster: the
// three-node suite's self-call test saw one replica of two answer all.)
//
// tower starts every endpoint at a prior and mixes its first sample into
// it with the same tiny weight. That suits a prior taken from the other
// endpoints (JoinRTT, which MarkResponsive's rejoin also uses): it is on
// their scale, a decayed peak. The default prior, when nothing is known
// (the endpoints of a new set), is only a guess, and mixed in it kept a
// new set's estimates at their decaying 30 ms priors, in the order they
// were created (a second apart is 10 %), for the tens of seconds they
// take to come down to the real RTTs; the one created last lost every
// pair meanwhile (the three-node TestBreaker starved a replica so for
// 17 s). Here:
//
//   - the first sample replaces the default prior, whatever its value;
//   - until its first request is placed, an endpoint costs 0 (Cost): it
//     is measured before it is compared;
//   - an endpoint no request was placed on for Remeasure costs 0 again,
//     once, against one that had a request meanwhile (remeasured), and
//     the sample of that request replaces its estimate: it is measured
//     anew. In tower one slow answer (a CPU stall on
//     a busy node, a GC pause) is a peak that keeps its endpoint out of
//     every pair until the estimate decays below its peers', τ·ln(peak /
//     peers): 50 ms against 2 ms is 32 s, and an endpoint that recovered
//     from being slow waits as long. Measured anew, it is back as soon as
//     it answers like them, and one that is still slow takes one request
//     every Remeasure per client (at 100 req/s, 0.5 %). The three-node
//     suite's self-call, breaker and scale-up tests each saw a replica
//     take no request for the seconds they watched. When neither of a
//     pair had a request for Remeasure (under one request per Remeasure
//     per endpoint), their estimates decide, as in tower: a slow endpoint
//     comes back when its estimate has decayed below its peers' sampled
//     ones, and the latency preference holds at low load (were both to
//     cost 0, the pick would be a coin toss, and a slow replica would
//     take its count's share).
//
// Decay toward 0 is memoryless (E·w₁·w₂ = E·exp(-(Δ₁+Δ₂)/τ)), so the
// estimate is kept as one float64, x = ln E + (u−origin)/τ, from which E
// at any t is exp(x − (t−origin)/τ): a read stores only u, a sample swaps
// x with a compare-and-swap, and no lock pairs E with its time. The
// default prior, and an estimate to be measured anew, is stored as −x
// (x ≥ 0: E is at least 1 ns), so that whether the next sample replaces
// E is part of the word the swap compares.

// Remeasure is how long an endpoint may go without a request placed on
// it before it costs 0 once, to be measured anew (above).
const Remeasure = 2 * time.Second

// estimate returns the estimate at t.
func (e *Endpoint) estimate(t int64) float64 { return e.at(e.logEst.Load(), t) }

// at is the estimate the stored word bits stands for at t.
func (e *Endpoint) at(bits uint64, t int64) float64 {
	return math.Exp(math.Abs(math.Float64frombits(bits)) - float64(t-e.origin)*e.invDecay)
}

// logAt is x for the estimate est at t.
func (e *Endpoint) logAt(est float64, t int64) float64 {
	return math.Log(max(est, 1)) + float64(t-e.origin)*e.invDecay
}

// touch moves u to t unless it is there or later.
func (e *Endpoint) touch(t int64) {
	if e.updated.Load() < t {
		e.updated.Store(t)
	}
}

// setPrior makes rtt the estimate as of now, the default (DefaultRTT,
// replaced by the first sample) when rtt is not positive; until a request
// is placed the endpoint costs 0.
func (e *Endpoint) setPrior(rtt time.Duration, now int64) {
	e.fresh.Store(true)
	x := e.logAt(float64(rtt), now)
	if rtt <= 0 {
		x = -e.logAt(float64(DefaultRTT), now)
	}
	e.logEst.Store(math.Float64bits(x))
	e.touch(now)
}

// remeasure makes the next sample replace the estimate, as the first
// replaces the default prior (Remeasure): the estimate is kept, for
// reading, until a sample comes.
func (e *Endpoint) remeasure() {
	for {
		old := e.logEst.Load()
		x := math.Float64frombits(old)
		if math.Signbit(x) || e.logEst.CompareAndSwap(old, math.Float64bits(-x)) {
			return
		}
	}
}

// observe folds the sample rtt (nanoseconds) taken at now into the
// estimate. Concurrent samples each apply whole (the swap retries); a
// read racing with them can make u lag by the width of the race.
func (e *Endpoint) observe(rtt float64, now int64) {
	for {
		old := e.logEst.Load()
		u := e.updated.Load()
		t := max(now, u)
		est := e.at(old, u) // E as of u
		if est < rtt || math.Signbit(math.Float64frombits(old)) {
			est = rtt // the peak, or the first sample after the default
		} else {
			w := math.Exp(-float64(t-u) * e.invDecay)
			est = est*w + rtt*(1-w)
		}
		if e.logEst.CompareAndSwap(old, math.Float64bits(e.logAt(est, t))) {
			e.touch(t)
			return
		}
	}
}
