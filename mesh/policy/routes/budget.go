package routes

import (
	"sync"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// budgetBuckets is how many buckets a Budget's window has. A request or
// retry counts from the moment it is recorded until the bucket it fell in
// leaves the window: for between ttl×(budgetBuckets−1)/budgetBuckets and
// ttl (9 to 10 s for the default 10 s).
const budgetBuckets = 10

// Budget bounds retries to a share of requests, as Linkerd's retry budget:
// a retry is allowed while retries + 1 <= ratio × requests +
// minPerSecond × ttl, both counted over a sliding window of ttl. It is
// safe for concurrent use; a nil *Budget allows every retry.
type Budget struct {
	ratio   float64
	reserve float64 // minPerSecond × ttl in seconds
	bucket  time.Duration
	now     func() time.Time
	start   time.Time

	mu      sync.Mutex
	buckets [budgetBuckets]budgetBucket
}

type budgetBucket struct {
	slot                  int64 // which bucket-long interval since start
	deposits, withdrawals int64
}

// Default budget: Linkerd's.
const (
	defaultBudgetRatio = 0.2
	defaultBudgetMin   = 10
	defaultBudgetTTL   = 10 * time.Second
	budgetRatioEpsilon = 1e-9 // so that 0.57 × 100 (56.99999999999999) allows 57
)

// NewBudget makes a budget from m: a nil m is ratio 0.2, 10 per second,
// ttl 10 s; an unset or non-positive ttl is 10 s. now is the clock (nil:
// time.Now).
func NewBudget(m *destinationpb.RetryBudget, now func() time.Time) *Budget {
	ratio, minPerSecond, ttl := defaultBudgetRatio, float64(defaultBudgetMin), defaultBudgetTTL
	if m != nil {
		ratio, minPerSecond, ttl = max(m.Ratio, 0), float64(m.MinPerSecond), m.Ttl.AsDuration()
		if m.Ttl == nil || ttl <= 0 {
			ttl = defaultBudgetTTL
		}
	}
	if now == nil {
		now = time.Now
	}
	b := &Budget{
		ratio:   ratio,
		reserve: minPerSecond * ttl.Seconds(),
		bucket:  max(ttl/budgetBuckets, 1),
		now:     now,
	}
	b.start = now()
	for i := range b.buckets {
		b.buckets[i].slot = -1
	}
	return b
}

// Deposit records one original request.
func (b *Budget) Deposit() {
	if b == nil {
		return
	}
	b.mu.Lock()
	b.current().deposits++
	b.mu.Unlock()
}

// Withdraw records one retry and reports true when the budget allows it;
// false (an overflow) records nothing.
func (b *Budget) Withdraw() bool {
	if b == nil {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	cur := b.current()
	var deposits, withdrawals int64
	for i := range b.buckets {
		if k := &b.buckets[i]; k.slot > cur.slot-budgetBuckets {
			deposits += k.deposits
			withdrawals += k.withdrawals
		}
	}
	if float64(withdrawals+1) > b.ratio*float64(deposits)+b.reserve+budgetRatioEpsilon {
		return false
	}
	cur.withdrawals++
	return true
}

// current returns the bucket of now, emptied when it last held an older
// interval. Callers hold mu.
func (b *Budget) current() *budgetBucket {
	slot := int64(max(b.now().Sub(b.start), 0) / b.bucket)
	k := &b.buckets[slot%budgetBuckets]
	if k.slot != slot {
		*k = budgetBucket{slot: slot}
	}
	return k
}
