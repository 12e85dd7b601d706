package destination

import (
	"fmt"
	"log/slog"
	"sync"
)

// onceLog logs each distinct warning once: policies are recomputed per
// stream and per change, and would repeat what they found wrong. Past
// 1000 distinct warnings it forgets them all, so memory stays bounded
// (and a warning still true is logged again, now and then).
type onceLog struct {
	log  *slog.Logger
	mu   sync.Mutex
	seen map[string]struct{}
}

func newOnceLog(log *slog.Logger) *onceLog {
	return &onceLog{log: log, seen: map[string]struct{}{}}
}

// warn logs msg with args (slog key-value pairs) unless it did already.
func (o *onceLog) warn(msg string, args ...any) {
	key := msg + fmt.Sprint(args...)
	o.mu.Lock()
	_, seen := o.seen[key]
	if !seen {
		if len(o.seen) >= 1000 {
			clear(o.seen)
		}
		o.seen[key] = struct{}{}
	}
	o.mu.Unlock()
	if !seen {
		o.log.Warn(msg, args...)
	}
}
