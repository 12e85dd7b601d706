package httpproxy

import (
	"errors"
	"io"
	"os"
	"syscall"
	"testing"
)

// What counts as "reached a server", the retry rule's table: a request is
// sent again (to another endpoint) only when no server can have acted on
// it — whatever its method when nothing reached one, an idempotent one
// when the server may have read it but answered nothing.
func TestRetrySafeTable(t *testing.T) {
	refused := &dialError{err: syscall.ECONNREFUSED}
	reset := &dialError{err: syscall.ECONNRESET} // during connect or TLS
	broke := func(reused, sent, answered bool) error {
		return &attemptError{err: io.ErrUnexpectedEOF, reused: reused, sent: sent, answered: answered}
	}
	get := Request{Method: "GET", Replayable: true}
	post := Request{Method: "POST", Replayable: true, ContentLength: 4}
	streamed := Request{Method: "POST", ContentLength: 1 << 20} // body not held
	for _, c := range []struct {
		name string
		req  Request
		err  error
		want bool
	}{
		{"connect refused, GET", get, refused, true},
		{"connect refused, POST", post, refused, true},
		{"reset while connecting, POST", post, reset, true},
		{"connect refused, body not held", streamed, refused, false},
		{"peer proxy: app refused, POST", post, errPeerNotReached, true},
		{"peer proxy: app broke, GET", get, errPeerAppFailed, true},
		{"peer proxy: app broke, POST", post, errPeerAppFailed, false},
		{"pooled conn closed before the request was written, POST", post, broke(true, false, false), true},
		{"pooled conn broke after the request was written, GET", get, broke(true, true, false), true},
		{"pooled conn broke after the request was written, POST", post, broke(true, true, false), false},
		{"fresh conn broke after the request was written, GET", get, broke(false, true, false), false},
		{"fresh conn broke before the request was written, POST", post, broke(false, false, false), true},
		{"some response came back, GET", get, broke(true, true, true), false},
		{"response timeout, GET", get, os.ErrDeadlineExceeded, false},
		{"client went away, GET", get, &clientError{err: io.EOF}, false},
		{"a limit fired, GET", get, &limitError{limit: "write-stall", err: errors.New("stalled")}, false},
	} {
		x := &exchange{req: &c.req}
		if got := x.retrySafe(c.err); got != c.want {
			t.Errorf("%s: re-sent %v, want %v", c.name, got, c.want)
		}
	}
	x := &exchange{req: &get, attempts: maxResends + 1}
	if x.retrySafe(refused) {
		t.Errorf("re-sent after %d attempts, want at most %d re-sends", x.attempts, maxResends)
	}
}
