package routes

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

func TestBackoffBounds(t *testing.T) {
	ceilings := map[int]time.Duration{
		-1: 50 * time.Millisecond, 0: 50 * time.Millisecond, 1: 50 * time.Millisecond,
		2: 100 * time.Millisecond, 3: 200 * time.Millisecond, 4: 250 * time.Millisecond,
		5: 250 * time.Millisecond, 64: 250 * time.Millisecond, math.MaxInt: 250 * time.Millisecond,
	}
	for retry, ceiling := range ceilings {
		if got := Backoff(retry, 0); got != 25*time.Millisecond {
			t.Errorf("Backoff(%d, 0) = %v, want 25ms", retry, got)
		}
		if got := Backoff(retry, math.MaxUint64); got != ceiling {
			t.Errorf("Backoff(%d, max) = %v, want %v", retry, got, ceiling)
		}
		rnd := rand.New(rand.NewPCG(1, uint64(retry)))
		var sum time.Duration
		const n = 10000
		for range n {
			d := Backoff(retry, rnd.Uint64())
			if d < 25*time.Millisecond || d > ceiling {
				t.Fatalf("Backoff(%d) = %v, out of [25ms, %v]", retry, d, ceiling)
			}
			sum += d
		}
		// Uniform: the mean is midway, within 2 %.
		mid := (25*time.Millisecond + ceiling) / 2
		if mean := sum / n; mean < mid*98/100 || mean > mid*102/100 {
			t.Errorf("Backoff(%d) mean %v, want about %v", retry, mean, mid)
		}
	}
}
