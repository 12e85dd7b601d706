// Package ratelimit limits requests per second: one generic cell rate
// algorithm (GCRA) bucket per limit, lock-free, with a small burst, and
// per-client buckets for fair shares (HTTPLocalRateLimitPolicy, ARCHITECTURE.md
// §9). Every call takes the time as monotonic nanoseconds.
package ratelimit

import (
	"sync"
	"sync/atomic"
)

// Bucket admits up to a rate of requests per second with a burst of a
// tenth of a second's worth (at least one): over any window of w seconds
// it admits at most rate·w + burst. Safe for concurrent use.
type Bucket struct {
	interval int64 // nanoseconds per request
	tau      int64 // how far ahead of now the schedule may run (the burst)
	tat      atomic.Int64
}

// NewBucket returns a bucket for perSecond requests a second (at least 1).
func NewBucket(perSecond uint32) *Bucket {
	perSecond = max(perSecond, 1)
	interval := int64(1e9) / int64(perSecond)
	burst := max(int64(perSecond)/10, 1)
	return &Bucket{interval: interval, tau: interval * (burst - 1)}
}

// Allow reports whether a request at now is admitted, and counts it if so.
func (b *Bucket) Allow(now int64) bool {
	for {
		tat := b.tat.Load()
		next := max(tat, now) + b.interval
		if next-now > b.tau+b.interval {
			return false
		}
		if b.tat.CompareAndSwap(tat, next) {
			return true
		}
	}
}

// refund gives back one request Allow admitted (a later check refused it).
func (b *Bucket) refund() { b.tat.Add(-b.interval) }

// MaxClients bounds the per-client buckets of a Limit; clients beyond it
// share one bucket.
const MaxClients = 4096

// Limit is one HTTPLocalRateLimitPolicy: a total bucket, a bucket per
// client identity (plaintext clients share the identity ""), and
// overrides giving named identities their own rate.
type Limit struct {
	total     *Bucket // nil: no total limit
	perClient uint32  // 0: no per-identity limit
	overrides map[string]uint32

	mu       sync.Mutex
	clients  map[string]*Bucket
	overflow *Bucket
}

// NewLimit returns a limit; 0 means none of that kind.
func NewLimit(total, perClient uint32, overrides map[string]uint32) *Limit {
	l := &Limit{perClient: perClient, overrides: overrides, clients: map[string]*Bucket{}}
	if total > 0 {
		l.total = NewBucket(total)
	}
	return l
}

// Allow reports whether a request from client id at now is admitted: by
// its own bucket (its override's rate, or the per-identity one) and the
// total. A request refused by its own bucket is not charged to the total,
// nor one the total refuses to its own bucket.
func (l *Limit) Allow(id string, now int64) bool {
	b := l.client(id)
	if b != nil && !b.Allow(now) {
		return false
	}
	if l.total == nil || l.total.Allow(now) {
		return true
	}
	if b != nil {
		b.refund()
	}
	return false
}

// client returns id's bucket, or nil when id has no per-client limit.
func (l *Limit) client(id string) *Bucket {
	rate, ok := l.overrides[id]
	if !ok {
		rate = l.perClient
	}
	if rate == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if b := l.clients[id]; b != nil {
		return b
	}
	if len(l.clients) >= MaxClients {
		if l.overflow == nil {
			l.overflow = NewBucket(l.perClient)
		}
		return l.overflow
	}
	b := NewBucket(rate)
	l.clients[id] = b
	return b
}
