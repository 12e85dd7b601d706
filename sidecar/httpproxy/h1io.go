package httpproxy

import (
	"errors"
	"io"
	"os"
	"time"
)

// Buffer sizes of the HTTP/1.1 fast path.
const (
	// h1ReadBuf is where a connection's heads are read. A request head
	// that does not fit goes to net/http (which allows MaxHeaderBytes).
	h1ReadBuf = 4 << 10
	// maxResponseHead bounds a response head, as MaxResponseHeaderBytes
	// does for the net/http transport.
	maxResponseHead = 64 << 10
	// maxChunkLine bounds a chunk-size line or trailer field line.
	maxChunkLine = 4 << 10
	// maxTrailers bounds the trailer section of a chunked body.
	maxTrailers = 64 << 10
)

var (
	errHeadTooLarge = errors.New("head too large")
	errBadChunk     = errors.New("malformed chunked body")
)

// h1reader buffers one side of a connection for the fast path. Every
// read from the connection has a deadline: a fixed one (due), or a
// rolling one that each read must beat (idleFor).
type h1reader struct {
	c    readConn
	buf  []byte
	r, w int
	// got counts bytes read from c since reset (did the peer answer?).
	got int
	// dl is the deadline set on c. idle, when not 0, is the rolling
	// deadline; renewAt is when it is next pushed back.
	dl      time.Time
	idle    time.Duration
	renewAt time.Time
}

// readConn and writeConn are the parts of a net.Conn each side uses.
type (
	readConn interface {
		io.Reader
		SetReadDeadline(time.Time) error
	}
	writeConn interface {
		io.Writer
		SetWriteDeadline(time.Time) error
	}
)

func newReader(c readConn, size int) *h1reader {
	return &h1reader{c: c, buf: make([]byte, size)}
}

// deadlineSlack is how early a fixed deadline may fire: moving a deadline
// costs a runtime timer update (about 2.5 µs a request on the fast path,
// BenchmarkMeshHTTP1), so one already set a little earlier is kept.
func deadlineSlack(d time.Duration) time.Duration { return min(d/8, time.Second) }

// due makes the reads that follow end at d after now, or up to
// deadlineSlack(d) before; d == 0 means no deadline.
func (b *h1reader) due(d time.Duration) {
	b.idle = 0
	if d == 0 {
		b.until(time.Time{})
		return
	}
	t := time.Now().Add(d)
	if !b.dl.IsZero() && !b.dl.After(t) && t.Sub(b.dl) <= deadlineSlack(d) {
		return
	}
	b.until(t)
}

// until makes t the deadline of every read until the next due, until or
// idleFor; zero t means none.
func (b *h1reader) until(t time.Time) {
	b.idle = 0
	if t.Equal(b.dl) {
		return
	}
	b.dl = t
	b.c.SetReadDeadline(t)
}

// idleFor makes each read wait at most about d (between 3/4 d and d) for
// data; 0 means no deadline.
func (b *h1reader) idleFor(d time.Duration) {
	if d == 0 {
		b.until(time.Time{})
		return
	}
	b.idle, b.renewAt = d, time.Time{}
}

// read reads once from the connection under its deadline.
func (b *h1reader) read(p []byte) (int, error) {
	if b.idle > 0 && !time.Now().Before(b.renewAt) {
		b.dl = time.Now().Add(b.idle)
		b.c.SetReadDeadline(b.dl)
		b.renewAt = b.dl.Add(-b.idle * 3 / 4)
	}
	n, err := b.c.Read(p)
	b.got += n
	return n, err
}

// renew pushes a rolling deadline d ahead when a quarter of it has passed.
func renew(set func(time.Time) error, d time.Duration, renewAt *time.Time) {
	if now := time.Now(); !now.Before(*renewAt) {
		set(now.Add(d))
		*renewAt = now.Add(d / 4)
	}
}

// isTimeout reports a deadline that passed.
func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

func (b *h1reader) buffered() []byte { return b.buf[b.r:b.w] }

func (b *h1reader) discard(n int) { b.r += n }

// fill reads once more, after making room: buffered bytes move to the
// front; a full buffer grows, up to max.
func (b *h1reader) fill(max int) error {
	if b.r == b.w {
		b.r, b.w = 0, 0
	}
	if b.w == len(b.buf) && b.r > 0 {
		b.w = copy(b.buf, b.buf[b.r:b.w])
		b.r = 0
	}
	if b.w == len(b.buf) {
		if len(b.buf) >= max {
			return errHeadTooLarge
		}
		nb := make([]byte, min(2*len(b.buf), max))
		copy(nb, b.buf[:b.w])
		b.buf = nb
	}
	for {
		n, err := b.read(b.buf[b.w:])
		b.w += n
		if n > 0 {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// head returns the next complete head (through its empty line), reading
// as needed, growing the buffer up to max; the caller discards it once
// done with it.
func (b *h1reader) head(max int) ([]byte, error) {
	for {
		if n := headEnd(b.buffered()); n > 0 {
			return b.buffered()[:n], nil
		}
		if err := b.fill(max); err != nil {
			return nil, err
		}
	}
}

// h1writer batches writes to one side of a connection. With idle set,
// each write must make progress within about idle (3/4 idle to idle): a
// peer that stops reading does not hold the connection forever.
type h1writer struct {
	c       writeConn
	buf     []byte
	idle    time.Duration
	renewAt time.Time
}

func (w *h1writer) write(p []byte) (int, error) {
	if w.idle > 0 {
		renew(w.c.SetWriteDeadline, w.idle, &w.renewAt)
	}
	return w.c.Write(p)
}

func (w *h1writer) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.write(w.buf)
	w.buf = w.buf[:0]
	return err
}
