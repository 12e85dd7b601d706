package routes

import (
	"math/bits"
	"time"
)

// Retry backoff bounds (Linkerd's and Envoy's defaults).
const (
	minBackoff = 25 * time.Millisecond
	maxBackoff = 250 * time.Millisecond
)

// Backoff returns how long to wait before retry number retry (1 for the
// first): uniform, from rnd (e.g. math/rand/v2.Uint64()), in
// [25 ms, min(25 ms × 2^retry, 250 ms)]: the first retry waits 25–50 ms,
// the second 25–100 ms, the third 25–200 ms, the later ones 25–250 ms.
func Backoff(retry int, rnd uint64) time.Duration {
	ceiling := maxBackoff
	if retry < 4 {
		ceiling = min(minBackoff<<max(retry, 1), maxBackoff)
	}
	span := uint64(ceiling-minBackoff) + 1
	x, _ := bits.Mul64(rnd, span)
	return minBackoff + time.Duration(x)
}
