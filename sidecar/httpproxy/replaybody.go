package httpproxy

import (
	"errors"
	"io"
	"sync"
)

// MaxReplayBody is how much of a request body the proxy holds so that a
// retry can send it again (DESIGN.md §8); a larger body is not retried.
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

	mu       sync.Mutex
	buf      []byte
	overflow bool // more than MaxReplayBody was read: buf is gone
	eof      bool
	gen      int
}

var errStaleAttempt = errors.New("request body: a newer attempt took over")

func newReplayBody(src io.ReadCloser) *replayBody { return &replayBody{src: src} }

// replayable reports whether a new attempt can send the whole body.
func (b *replayBody) replayable() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.overflow
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
	b := a.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if a.gen != b.gen {
		return 0, errStaleAttempt
	}
	if a.off < len(b.buf) {
		n := copy(p, b.buf[a.off:])
		a.off += n
		return n, nil
	}
	if b.eof {
		return 0, io.EOF
	}
	// Past MaxReplayBody (possibly reached during this attempt, a retry
	// of a body still streaming) the rest goes on unrecorded: this
	// attempt still sends it all, no later one is made (replayable).
	n, err := b.src.Read(p)
	if n > 0 && !b.overflow {
		if len(b.buf)+n > MaxReplayBody {
			b.overflow, b.buf = true, nil
		} else {
			b.buf = append(b.buf, p[:n]...)
			a.off = len(b.buf)
		}
	}
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close is the transport saying it is done with this attempt's body; the
// client's body stays open for a retry (the server handler closes it).
func (a *attemptBody) Close() error { return nil }
