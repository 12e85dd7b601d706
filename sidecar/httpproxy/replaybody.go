package httpproxy

import (
	"errors"
	"io"
	"net/http"
	"sync"
)

// MaxReplayBody is how much of a request body the proxy holds so that a
// retry can send it again (ARCHITECTURE.md §8); a larger body is not retried.
const MaxReplayBody = 64 << 10

// replayBody records a request body while the first attempt streams it,
// so that a retry can send it again: the recorded bytes first, then the
// rest of the client's body. Nothing waits for the whole body before the
// first attempt (a client stream may need the response first). Past
// MaxReplayBody it stops recording, and the request can no longer be
// retried. Only the newest attempt may read; an older attempt's reads
// (net/http's transport may still be writing it) end with an error.
type replayBody struct {
	src io.ReadCloser
	// read is held across src.Read (one reader of the client's body at
	// a time); mu guards the rest and is never held across a read, so
	// that a stale attempt waiting for the client blocks neither
	// replayable nor a new attempt's reading of what was recorded.
	read sync.Mutex

	mu       sync.Mutex
	buf      []byte
	total    int  // bytes read from src
	overflow bool // more than MaxReplayBody was read: buf is gone
	eof      bool
	gen      int
}

var (
	errStaleAttempt = errors.New("request body: a newer attempt took over")
	errBodyLost     = errors.New("request body: more than can be replayed was read for an earlier attempt")
)

func newReplayBody(src io.ReadCloser) *replayBody { return &replayBody{src: src} }

// replayable reports whether a new attempt can send the whole body.
func (b *replayBody) replayable() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.overflow
}

// forget drops what was recorded, once no attempt will be made again.
func (b *replayBody) forget() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.overflow, b.buf = true, nil
}

// sendWith makes b out's body, and its GetBody, with which net/http's
// HTTP/2 transport sends the request again on a new connection when the
// server refused its stream unprocessed (a GOAWAY that raced it, or
// REFUSED_STREAM) after the body was read.
func (b *replayBody) sendWith(out *http.Request) {
	out.Body = b.attempt()
	out.GetBody = func() (io.ReadCloser, error) {
		if !b.replayable() {
			return nil, errBodyLost
		}
		return b.attempt(), nil
	}
}

// attempt returns the body of a new attempt; earlier attempts' bodies
// stop working.
func (b *replayBody) attempt() io.ReadCloser {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gen++
	return &attemptBody{b: b, gen: b.gen}
}

type attemptBody struct {
	b   *replayBody
	gen int
	off int
}

func (a *attemptBody) Read(p []byte) (int, error) {
	if n, ok, err := a.recorded(p); ok {
		return n, err
	}
	b := a.b
	b.read.Lock()
	defer b.read.Unlock()
	// Another attempt may have read on while this one waited.
	if n, ok, err := a.recorded(p); ok {
		return n, err
	}
	n, err := b.src.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += n
	if n > 0 && !b.overflow {
		if len(b.buf)+n > MaxReplayBody {
			// Past MaxReplayBody (possibly during a retry of a body
			// still streaming) the rest goes on unrecorded: this
			// attempt still sends it all, no later one is made.
			b.overflow, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p[:n]...)
		}
	}
	if err == io.EOF {
		b.eof = true
	}
	if a.gen != b.gen {
		return 0, errStaleAttempt // what it read is kept for the newer attempt
	}
	a.off += n
	return n, err
}

// recorded answers a read from what was recorded, when it can (ok):
// with bytes, the end, or an error for a stale attempt or one that can
// no longer have every byte. Otherwise the attempt has seen all that
// was read so far and reads on from the client.
func (a *attemptBody) recorded(p []byte) (n int, ok bool, err error) {
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case a.gen != b.gen:
		return 0, true, errStaleAttempt
	case a.off < len(b.buf):
		n = copy(p, b.buf[a.off:])
		a.off += n
		return n, true, nil
	case a.off < b.total:
		return 0, true, errBodyLost
	case b.eof:
		return 0, true, io.EOF
	}
	return 0, false, nil
}

// Close is the transport saying it is done with this attempt's body; the
// client's body stays open for a retry (the server handler closes it).
func (a *attemptBody) Close() error { return nil }
