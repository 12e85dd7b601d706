package loadgen

import (
	"slices"
	"time"
)

// Summary holds the percentiles of a set of latencies.
type Summary struct {
	Count                    int
	P50, P90, P99, P999, Max time.Duration
}

// Summarize sorts a copy of lats and reads its percentiles (nearest rank).
func Summarize(lats []time.Duration) Summary {
	if len(lats) == 0 {
		return Summary{}
	}
	s := slices.Clone(lats)
	slices.Sort(s)
	return Summary{
		Count: len(s),
		P50:   Percentile(s, 50),
		P90:   Percentile(s, 90),
		P99:   Percentile(s, 99),
		P999:  Percentile(s, 99.9),
		Max:   s[len(s)-1],
	}
}

// Percentile returns the nearest-rank p-th percentile of sorted.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[max(0, min(rank, len(sorted)-1))]
}
