package balance

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
)

// benchBreakers wraps endpoints(n) in breakers with the default accrual
// config; with halfOut every other one is ejected for an hour (the floor
// allows half).
func benchBreakers(b *testing.B, n int, halfOut bool) []*Breaker {
	c := accrual.DefaultConfig()
	c.MinPenalty, c.MaxPenalty = 3600*1e9, 3600*1e9
	a := newAccrual(b, c)
	var bs []*Breaker
	for _, e := range endpoints(n) {
		bs = append(bs, a.Add(e))
	}
	if halfOut {
		for i := 0; i < n; i += 2 {
			fail(bs[i], t0, c.ConsecutiveFailures)
		}
		if out := a.Stats().Out; out != int64(n/2) {
			b.Fatalf("%d out, want %d", out, n/2)
		}
	}
	return bs
}

// byAccrual runs op, one request a microsecond apart, over 10 and 1000
// breakers, all in and half ejected.
func byAccrual(b *testing.B, op func(bs []*Breaker, now int64)) {
	for _, n := range []int{10, 1000} {
		for _, halfOut := range []bool{false, true} {
			b.Run(fmt.Sprintf("endpoints=%d/halfOut=%v", n, halfOut), func(b *testing.B) {
				bs := benchBreakers(b, n, halfOut)
				now := t0 + sec
				b.ReportAllocs()
				for b.Loop() {
					now += 1000
					op(bs, now)
				}
			})
		}
	}
}

func BenchmarkPickP2CAvailable(b *testing.B) {
	byAccrual(b, func(bs []*Breaker, now int64) { PickP2CAvailable(bs, now, rand.Uint64()) })
}

// BenchmarkPickAvailableAndRecord is one request's whole balancing cost
// with accrual: pick, Start, Observe, Done, Success.
func BenchmarkPickAvailableAndRecord(b *testing.B) {
	byAccrual(b, func(bs []*Breaker, now int64) {
		p := PickP2CAvailable(bs, now, rand.Uint64())
		h := p.Start(now)
		h.Observe(now + 500)
		h.Done()
		p.Success(now + 500)
	})
}

// BenchmarkSuccessFailure reports outcomes on an endpoint that stays in:
// a failure then a success (the count goes up and back to 0).
func BenchmarkSuccessFailure(b *testing.B) {
	bs := benchBreakers(b, 3, false)
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		bs[0].Failure(now, 0)
		bs[0].Success(now)
	}
}
