package balance

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

func endpoints(n int) []*Endpoint {
	eps := make([]*Endpoint, n)
	for i := range eps {
		eps[i] = NewEndpoint(Config{}, 0, t0)
		sample(eps[i], t0, t0+int64(i%7+1)*ms)
	}
	return eps
}

// bySize runs op, one request a microsecond apart, over 10 and 1000
// endpoints.
func bySize(b *testing.B, op func(eps []*Endpoint, now int64)) {
	for _, n := range []int{10, 1000} {
		b.Run(fmt.Sprintf("endpoints=%d", n), func(b *testing.B) {
			eps := endpoints(n)
			now := t0 + sec
			b.ReportAllocs()
			for b.Loop() {
				now += 1000
				op(eps, now)
			}
		})
	}
}

func BenchmarkPickP2C(b *testing.B) {
	bySize(b, func(eps []*Endpoint, now int64) { PickP2C(eps, now, rand.Uint64()) })
}

func BenchmarkPickLeastLoaded(b *testing.B) {
	eps := endpoints(1000)
	b.ReportAllocs()
	for b.Loop() {
		PickLeastLoaded(eps, rand.Uint64())
	}
}

// BenchmarkStartObserveDone is the record side of one request.
func BenchmarkStartObserveDone(b *testing.B) {
	e := endpoints(1)[0]
	now := t0 + sec
	b.ReportAllocs()
	for b.Loop() {
		now += 1000
		h := e.Start(now)
		h.Observe(now + 500)
		h.Done()
	}
}

// BenchmarkPickAndRecord is one request's whole balancing cost: pick,
// Start, Observe, Done.
func BenchmarkPickAndRecord(b *testing.B) {
	bySize(b, func(eps []*Endpoint, now int64) {
		h := PickP2C(eps, now, rand.Uint64()).Start(now)
		h.Observe(now + 500)
		h.Done()
	})
}
