// Package eventually waits in tests for a condition to hold: it checks at
// once, then on a short ticker, and fails the test naming what it waited
// for when the limit passes. It is the one polling loop the unit tests
// share; a test that can wait on a channel or an event should.
package eventually

import (
	"testing"
	"time"
)

// Interval is how often the condition is checked.
const Interval = 5 * time.Millisecond

// Within fails t unless cond holds within limit.
func Within(t testing.TB, limit time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Holds(limit, cond) {
		t.Fatalf("timed out after %v waiting for %s", limit, what)
	}
}
