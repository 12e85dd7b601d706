package eventually

import "time"

// Holds reports whether cond holds within limit, checking as Within does.
// For a test that reports the failure itself: with the last values it
// saw, a goroutine dump, or as an error rather than a fatal one.
func Holds(limit time.Duration, cond func() bool) bool {
	if cond() {
		return true
	}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	tick := time.NewTicker(Interval)
	defer tick.Stop()
	for {
		select {
		case <-tick.C:
			if cond() {
				return true
			}
		case <-deadline.C:
			return cond()
		}
	}
}
