package eventually

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

func TestWithinReturnsOnceTheConditionHolds(t *testing.T) {
	var n atomic.Int32
	Within(t, 5*time.Second, "the third check", func() bool { return n.Add(1) >= 3 })
	if got := n.Load(); got != 3 {
		t.Errorf("checked %d times, want 3 (it returns at the first true)", got)
	}
}

func TestWithinFailsNamingWhatItWaitedFor(t *testing.T) {
	ft := &fakeT{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		Within(ft, 20*time.Millisecond, "the impossible", func() bool { return false })
	}()
	<-done
	if ft.msg != "timed out after 20ms waiting for the impossible" {
		t.Errorf("failure message %q", ft.msg)
	}
}

// fakeT records Fatalf and ends the goroutine as testing.T does.
type fakeT struct {
	testing.TB
	msg string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func TestHoldsReportsWithoutFailing(t *testing.T) {
	var n atomic.Int32
	if !Holds(5*time.Second, func() bool { return n.Add(1) >= 3 }) {
		t.Error("Holds = false for a condition that came true")
	}
	if got := n.Load(); got != 3 {
		t.Errorf("checked %d times, want 3 (it returns at the first true)", got)
	}
	t0 := time.Now()
	if Holds(20*time.Millisecond, func() bool { return false }) {
		t.Error("Holds = true for a condition that never held")
	}
	if d := time.Since(t0); d < 20*time.Millisecond {
		t.Errorf("gave up after %v, before the 20ms limit", d)
	}
}
