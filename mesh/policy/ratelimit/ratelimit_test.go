package ratelimit

import (
	"fmt"
	"testing"
)

const sec = int64(1e9)

// admitted counts what l admits of n requests from id spread evenly over
// seconds starting at start.
func admitted(allow func(now int64) bool, start int64, n int, seconds int64) int {
	got := 0
	for i := range n {
		if allow(start + int64(i)*seconds*sec/int64(n)) {
			got++
		}
	}
	return got
}

// Under three times its rate a bucket admits its rate (plus its burst).
func TestBucketHoldsItsRate(t *testing.T) {
	for _, rate := range []uint32{1, 10, 100, 1000} {
		b := NewBucket(rate)
		got := admitted(b.Allow, sec, int(rate)*3*10, 10)
		want := int(rate) * 10
		if got < want-1 || got > want+int(max(rate/10, 1)) {
			t.Errorf("rate %d over 10s at 3x: admitted %d, want %d (+ burst)", rate, got, want)
		}
	}
}

// A burst is a tenth of a second's worth: at once, no more.
func TestBucketBurst(t *testing.T) {
	b := NewBucket(100)
	got := 0
	for range 50 {
		if b.Allow(sec) {
			got++
		}
	}
	if got != 10 {
		t.Errorf("50 requests at one instant: admitted %d, want the burst of 10", got)
	}
}

// Two identities sharing a per-identity limit each get their share; an
// override gets its own rate; the total caps them all.
func TestLimitShares(t *testing.T) {
	l := NewLimit(0, 50, map[string]uint32{"vip": 200})
	for id, want := range map[string]int{"a": 500, "b": 500, "vip": 2000} {
		if got := admitted(func(now int64) bool { return l.Allow(id, now) }, sec, 3000, 10); got < want-1 || got > want+20 {
			t.Errorf("%s at 300/s for 10s: admitted %d, want about %d", id, got, want)
		}
	}
	total := NewLimit(100, 0, nil)
	got := 0
	for i := range 6000 { // a and b interleaved at 300/s each for 10s
		id := []string{"a", "b"}[i%2]
		if total.Allow(id, sec+int64(i)*10*sec/6000) {
			got++
		}
	}
	if got < 999 || got > 1010 {
		t.Errorf("total 100/s under 600/s for 10s: admitted %d, want about 1000", got)
	}
}

// Past MaxClients identities, new ones share one bucket.
func TestLimitBoundsClients(t *testing.T) {
	l := NewLimit(0, 1, nil)
	for i := range MaxClients + 10 {
		l.Allow(fmt.Sprint(i), sec)
	}
	if n := len(l.clients); n != MaxClients {
		t.Errorf("%d client buckets, want at most %d", n, MaxClients)
	}
}

func BenchmarkLimitAllow(b *testing.B) {
	l := NewLimit(1<<30, 1<<30, nil)
	now := sec
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		l.Allow("spiffe://cluster.local/ns/shop/sa/a", now)
	}
}

// A request the total refuses is not charged to its client's share: with
// the total saturated by others, a client's own bucket stays full.
func TestTotalRefusalNotChargedToClient(t *testing.T) {
	l := NewLimit(10, 10, nil)
	for i := range 100 { // "hog" exhausts the total (and its own share)
		l.Allow("hog", sec+int64(i))
	}
	for range 5 {
		l.Allow("a", sec+200) // refused by the total
	}
	b := l.client("a")
	if !b.Allow(sec + 200) {
		t.Error("a's own bucket was charged for requests the total refused")
	}
}
