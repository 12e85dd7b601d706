package routes

import (
	"sync"
	"testing"
	"time"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_000_000, 0)} }

// withdrawAll withdraws until the budget refuses and returns how many it allowed.
func withdrawAll(b *Budget) int {
	n := 0
	for b.Withdraw() {
		n++
		if n > 1_000_000 {
			panic("budget never refuses")
		}
	}
	return n
}

func deposit(b *Budget, n int) {
	for range n {
		b.Deposit()
	}
}

func TestBudgetArithmetic(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(nil, clock.now) // 0.2, 10/s, 10 s
	deposit(b, 1000)
	// 0.2 × 1000 + 10 × 10 = 300.
	for i := 1; i <= 300; i++ {
		if !b.Withdraw() {
			t.Fatalf("retry %d refused", i)
		}
	}
	if b.Withdraw() {
		t.Fatal("retry 301 allowed")
	}
	// Each further request buys a fifth of a retry.
	deposit(b, 4)
	if b.Withdraw() {
		t.Error("allowed after 4 more requests (0.8 retries)")
	}
	b.Deposit()
	if !b.Withdraw() || b.Withdraw() {
		t.Error("5 more requests must buy exactly one retry")
	}
}

func TestBudgetReserveOnly(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(nil, clock.now)
	if n := withdrawAll(b); n != 100 {
		t.Errorf("without requests %d retries allowed, want 100 (10/s × 10 s)", n)
	}
}

func TestBudgetParameters(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(&pb.RetryBudget{Ratio: 0.57, MinPerSecond: 1, Ttl: newDuration(4)}, clock.now)
	deposit(b, 100)
	if n := withdrawAll(b); n != 61 { // 0.57 × 100 (56.99999999999999 in float64) + 1 × 4
		t.Errorf("%d retries allowed, want 61", n)
	}
	zero := NewBudget(&pb.RetryBudget{}, clock.now) // ratio 0, min 0, ttl defaulted
	deposit(zero, 100)
	if zero.Withdraw() {
		t.Error("a zero budget allows a retry")
	}
	var none *Budget
	none.Deposit()
	if !none.Withdraw() {
		t.Error("a nil budget refuses")
	}
}

func TestBudgetWindow(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(&pb.RetryBudget{Ratio: 1, MinPerSecond: 0, Ttl: newDuration(10)}, clock.now)
	deposit(b, 10) // t = 0
	clock.advance(5 * time.Second)
	deposit(b, 10) // t = 5 s
	if n := withdrawAll(b); n != 20 {
		t.Fatalf("%d retries allowed, want 20", n)
	}
	// At 9.9 s everything still counts.
	clock.advance(4900 * time.Millisecond)
	if b.Withdraw() {
		t.Fatal("allowed at 9.9 s")
	}
	// At 10 s the first 10 requests leave the window; the 20 retries of
	// 5 s stay and outnumber the 10 requests left.
	clock.advance(100 * time.Millisecond)
	if b.Withdraw() {
		t.Fatal("allowed at 10 s with 20 retries against 10 requests")
	}
	// At 15 s both the requests and the retries of 5 s have left: empty.
	clock.advance(5 * time.Second)
	deposit(b, 3)
	if n := withdrawAll(b); n != 3 {
		t.Errorf("after expiry %d retries allowed, want 3", n)
	}
	// Long after, everything is gone; the clock going backwards is harmless.
	clock.advance(time.Hour)
	if b.Withdraw() {
		t.Error("allowed with no requests and no reserve")
	}
	clock.t = time.Unix(0, 0)
	b.Deposit()
	b.Withdraw()
}

func TestBudgetWindowRestores(t *testing.T) {
	clock := newFakeClock()
	b := NewBudget(nil, clock.now)
	deposit(b, 1000)
	if n := withdrawAll(b); n != 300 {
		t.Fatalf("%d allowed, want 300", n)
	}
	clock.advance(10 * time.Second)
	if n := withdrawAll(b); n != 100 {
		t.Errorf("after the window %d allowed, want the reserve of 100", n)
	}
}

func TestBudgetConcurrent(t *testing.T) {
	b := NewBudget(nil, nil)
	var wg sync.WaitGroup
	var mu sync.Mutex
	allowed := 0
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 0
			for range 1000 {
				b.Deposit()
				if b.Withdraw() {
					n++
				}
			}
			mu.Lock()
			allowed += n
			mu.Unlock()
		}()
	}
	wg.Wait()
	// 4000 requests: 0.2 × 4000 + 100 = 900 retries at the most.
	if allowed > 900 || allowed < 800 {
		t.Errorf("%d retries allowed of 4000 requests, want 800 to 900", allowed)
	}
}
