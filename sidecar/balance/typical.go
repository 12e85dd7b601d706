package balance

import (
	"math"
	"sync/atomic"
	"time"
)

// Typical is an endpoint's typical round trip: an EWMA over samples with
// weight typicalWeight, each sample capped at typicalCap times the
// average. One answer 10× slower moves it by 60 %; a change to 30×
// slower is followed within 8 answers. Unlike the peak-EWMA estimate,
// which one slow answer holds up for the decay's time, a scheduling
// hiccup moves it little and briefly. 0 is no sample. Safe for
// concurrent use.
type Typical struct{ bits atomic.Uint64 }

const (
	typicalWeight = 0.2
	typicalCap    = 4
)

// Get returns the typical RTT in nanoseconds, 0 before the first sample.
func (t *Typical) Get() float64 { return math.Float64frombits(t.bits.Load()) }

// Observe folds in the sample rtt.
func (t *Typical) Observe(rtt time.Duration) {
	s := float64(max(rtt, 1))
	for {
		old := t.bits.Load()
		v := math.Float64frombits(old)
		if v > 0 {
			v += typicalWeight * (min(s, typicalCap*v) - v)
		} else {
			v = s
		}
		if t.bits.CompareAndSwap(old, math.Float64bits(v)) {
			return
		}
	}
}
