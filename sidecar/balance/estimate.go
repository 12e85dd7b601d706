package balance

import (
	"math"
	"time"
)

// The RTT estimate of an Endpoint is a peak-EWMA, as tower's PeakEwma
// (tower/src/load/peak_ewma.rs) that linkerd2-proxy balances HTTP with,
// but for three things said below. Its state is an estimate E as of u,
// the time of its last sample. With τ the decay, h = τ/holdShare the
// hold, and w = exp(-(t-u)/τ):
//
//   - at t the estimate is E until u+h, then decays toward 0 with τ:
//     E·exp(-(t-u-h)/τ). An endpoint that is not picked is tried again
//     once it has decayed below the others;
//   - a sample s (the RTT of a request) at t, with C the estimate at t:
//     if C < s, the peak, E ← s; else E ← C·w + s·(1−w), an average
//     weighted toward s by the time since the last sample; then u ← t;
//   - the first sample replaces the prior (Config.DefaultRTT, JoinRTT,
//     MarkResponsive's) whatever its value, and until the first request
//     is placed on it the endpoint costs 0 (Cost): a prior is a guess,
//     and an endpoint is measured before it is compared.
//
// The three differences from tower:
//
//   - tower counts reading the cost as an update (u ← t on every read).
//     A request's sample then arrives an RTT after the pick that read its
//     endpoint and weighs 1 − e^(−RTT/τ), about 3·10⁻⁴ for 3 ms: a sample
//     below the estimate barely lowers it, and the estimate is in effect
//     the decayed maximum of recent samples. All estimates decay at one
//     rate, so two endpoints' keep their ratio however many fast answers
//     they give: the one whose warm-up peak was highest loses every pair
//     until the others' reach their real RTT (τ·ln(27 ms / 5 ms), 17 s:
//     the three-node TestBreaker starved a replica so). Weighted from the
//     last sample, the estimate of an endpoint that answers converges to
//     its RTT within τ whatever the read rate.
//   - tower decays at once. Without reads as updates, an estimate that
//     decays between frequent samples would be pulled toward 0 at every
//     one (biased to half the RTT, and every sample a peak); holding it
//     for h first keeps endpoints picked more often than every h
//     unbiased, and decays the ones that are not.
//   - tower mixes the first sample into the prior with the same tiny
//     weight: a new balancer's estimates stay near the default 30 ms for
//     tens of seconds, whatever the endpoints answer. Replacing it alone
//     would starve the endpoints of a new set that were not picked first:
//     their 30 ms priors against the others' measured 3 ms, for τ·ln 10.
//
// E and u are two atomics: a sample swaps E with a compare-and-swap and
// then stores u. A reader between the two sees the new E with the old u,
// the estimate a moment early; a concurrent sample retries on the new E.
const holdShare = 10

// estimate returns the estimate at t.
func (e *Endpoint) estimate(t int64) float64 {
	return e.estimateFrom(math.Float64frombits(e.est.Load()), e.updated.Load(), t)
}

// estimateFrom is the estimate at t of est as of u.
func (e *Endpoint) estimateFrom(est float64, u, t int64) float64 {
	if idle := t - u - e.hold; idle > 0 {
		return est * math.Exp(-float64(idle)*e.invDecay)
	}
	return est
}

// setPrior makes rtt the estimate as of now, until the first sample.
func (e *Endpoint) setPrior(rtt time.Duration, now int64) {
	e.sampled.Store(false)
	e.fresh.Store(true)
	e.est.Store(math.Float64bits(float64(rtt)))
	e.updated.Store(now)
}

// observe folds the sample rtt (nanoseconds) taken at now into the
// estimate.
func (e *Endpoint) observe(rtt float64, now int64) {
	for {
		old, u := e.est.Load(), e.updated.Load()
		t := max(now, u)
		est := e.estimateFrom(math.Float64frombits(old), u, t)
		if est < rtt || !e.sampled.Load() {
			est = rtt // the peak, or the first sample
		} else {
			w := math.Exp(-float64(t-u) * e.invDecay)
			est = est*w + rtt*(1-w)
		}
		if e.est.CompareAndSwap(old, math.Float64bits(est)) {
			e.sampled.Store(true)
			if e.updated.Load() < t {
				e.updated.Store(t)
			}
			return
		}
	}
}
