package httpproxy

import (
	"sync/atomic"
	"syscall"
	"time"
)

// How a fast-path client is watched while its request waits for response
// headers: a response that takes longer than watchAfter starts a check of
// the client's socket every watchEvery, so a client that left is noticed
// (and its upstream request cancelled) within watchAfter+watchEvery of
// leaving, and a quick response costs only a timer reset.
const (
	watchAfter = 50 * time.Millisecond
	watchEvery = 25 * time.Millisecond
)

// clientWatch notices a client that leaves (its FIN or RST arrives) while
// its request waits, and closes the upstream connection: for HTTP/1 the
// only way to cancel the request. net/http's server does the same for the
// requests it serves (the request's context ends).
type clientWatch struct {
	hc    *h1conn
	raw   syscall.RawConn // nil: no watching
	timer *time.Timer
	gen   atomic.Uint64 // bumped by each arm; a check loop of an older one stops
	armed atomic.Bool
	gone  atomic.Bool
}

// arm starts watching, from watchAfter on.
func (w *clientWatch) arm() {
	if w.raw == nil || !peerClosedSupported {
		return
	}
	w.gen.Add(1)
	w.armed.Store(true)
	if w.timer == nil {
		w.timer = time.AfterFunc(watchAfter, w.check)
		return
	}
	w.timer.Reset(watchAfter)
}

// disarm stops watching. A check loop already running stops at its next
// look; if it still sees the client gone, closing the upstream is right.
func (w *clientWatch) disarm() {
	if w.timer != nil {
		w.armed.Store(false)
		w.timer.Stop()
	}
}

// check runs on the timer's goroutine until disarmed or the client left.
func (w *clientWatch) check() {
	gen := w.gen.Load()
	for w.armed.Load() && w.gen.Load() == gen {
		if peerClosed(w.raw) {
			w.gone.Store(true)
			// Swap: the connection is ours to close only while its
			// request is in flight, never once back in a pool.
			if u := w.hc.up.Swap(nil); u != nil {
				u.close()
			}
			return
		}
		time.Sleep(watchEvery)
	}
}
