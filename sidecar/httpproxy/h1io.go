package httpproxy

import (
	"bytes"
	"errors"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/detect"
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

// Errors of a body copy, by side.
type (
	srcError struct{ err error }
	dstError struct{ err error }
)

func (e *srcError) Error() string { return "read body: " + e.err.Error() }
func (e *srcError) Unwrap() error { return e.err }
func (e *dstError) Error() string { return "write body: " + e.err.Error() }
func (e *dstError) Unwrap() error { return e.err }

// copier relays bodies from r to w, batching small pieces into w's buffer
// and copying large ones straight through buf.
type copier struct {
	r   *h1reader
	w   *h1writer
	buf []byte
}

// more flushes what is pending and reads more from the source.
func (c *copier) more(max int) error {
	if err := c.w.flush(); err != nil {
		return &dstError{err}
	}
	if err := c.r.fill(max); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err == errHeadTooLarge {
			err = errBadChunk
		}
		return &srcError{err}
	}
	return nil
}

// copyN relays exactly n body bytes. What is buffered goes into w's
// batch; the rest is read straight into buf (never past n, so a
// pipelined next message stays unread).
func (c *copier) copyN(n int64) error {
	take := int(min(n, int64(len(c.r.buffered()))))
	c.w.buf = append(c.w.buf, c.r.buffered()[:take]...)
	c.r.discard(take)
	n -= int64(take)
	if n == 0 {
		return nil
	}
	if err := c.w.flush(); err != nil {
		return &dstError{err}
	}
	for n > 0 {
		m, err := c.r.read(c.buf[:min(n, int64(len(c.buf)))])
		if m > 0 {
			if _, werr := c.w.write(c.buf[:m]); werr != nil {
				return &dstError{werr}
			}
			n -= int64(m)
			continue
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		if err != nil {
			return &srcError{err}
		}
	}
	return nil
}

// line consumes one CRLF-terminated line of at most maxChunkLine bytes
// and returns it without the CRLF; it is valid until the next read.
func (c *copier) line() ([]byte, error) {
	for {
		b := c.r.buffered()
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			if i == 0 || b[i-1] != '\r' {
				return nil, &srcError{errBadChunk}
			}
			c.r.discard(i + 1)
			return b[:i-1], nil
		}
		if len(b) >= maxChunkLine {
			return nil, &srcError{errBadChunk}
		}
		if err := c.more(maxChunkLine); err != nil {
			return nil, err
		}
	}
}

// copyChunked relays a chunked body (RFC 9112 §7.1): each chunk's data
// verbatim under a size line the proxy writes itself (extensions are
// checked, then dropped), the last chunk, the trailers and the final CRLF.
func (c *copier) copyChunked() error {
	for {
		line, err := c.line()
		if err != nil {
			return err
		}
		size, ok := chunkSize(line)
		if !ok {
			return &srcError{errBadChunk}
		}
		c.w.buf = strconv.AppendInt(c.w.buf, size, 16)
		c.w.buf = append(c.w.buf, '\r', '\n')
		if size == 0 {
			return c.trailers()
		}
		if err := c.copyN(size); err != nil {
			return err
		}
		end, err := c.line()
		if err != nil {
			return err
		}
		if len(end) != 0 {
			return &srcError{errBadChunk}
		}
		c.w.buf = append(c.w.buf, '\r', '\n')
	}
}

// trailers relays the trailer section through its empty line; each field
// must be valid.
func (c *copier) trailers() error {
	total := 0
	for {
		line, err := c.line()
		if err != nil {
			return err
		}
		if len(line) > 0 {
			if total += len(line); total > maxTrailers {
				return &srcError{errBadChunk}
			}
			if _, _, ok := splitHeader(line); !ok {
				return &srcError{errBadChunk}
			}
		}
		c.w.buf = append(c.w.buf, line...)
		c.w.buf = append(c.w.buf, '\r', '\n')
		if len(line) == 0 {
			return nil
		}
	}
}

// copyUntilEOF relays a body delimited by the end of the connection.
func (c *copier) copyUntilEOF() error {
	c.w.buf = append(c.w.buf, c.r.buffered()...)
	c.r.discard(len(c.r.buffered()))
	if err := c.w.flush(); err != nil {
		return &dstError{err}
	}
	for {
		m, err := c.r.read(c.buf)
		if m > 0 {
			if _, werr := c.w.write(c.buf[:m]); werr != nil {
				return &dstError{werr}
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return &srcError{err}
		}
	}
}

// chunkSize parses a chunk-size line: at most 15 hex digits, then
// optional whitespace and extensions, which must be well formed:
// *( BWS ";" BWS token [ BWS "=" BWS ( token / quoted-string ) ] ).
func chunkSize(line []byte) (int64, bool) {
	var n int64
	i := 0
	for ; i < len(line); i++ {
		d, ok := hexDigit(line[i])
		if !ok {
			break
		}
		n = n<<4 | int64(d)
	}
	if i == 0 || i > 15 {
		return 0, false
	}
	return n, validChunkExt(line[i:])
}

func hexDigit(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// validChunkExt reports whether b is a well-formed chunk-ext (trailing
// whitespace allowed, as net/http does).
func validChunkExt(b []byte) bool {
	for {
		b = trimBWS(b)
		if len(b) == 0 {
			return true
		}
		if b[0] != ';' {
			return false
		}
		b = trimBWS(b[1:])
		n := tokenLen(b)
		if n == 0 {
			return false
		}
		b = trimBWS(b[n:])
		if len(b) == 0 || b[0] != '=' {
			continue
		}
		b = trimBWS(b[1:])
		if len(b) > 0 && b[0] == '"' {
			n = quotedLen(b)
		} else {
			n = tokenLen(b)
		}
		if n <= 0 {
			return false
		}
		b = b[n:]
	}
}

func trimBWS(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	return b
}

// tokenLen is the length of the token at the start of b.
func tokenLen(b []byte) int {
	n := 0
	for n < len(b) && detect.IsTchar(b[n]) {
		n++
	}
	return n
}

// quotedLen is the length of the quoted-string at the start of b (which
// starts with a quote), or -1 when it is malformed or unterminated.
func quotedLen(b []byte) int {
	for i := 1; i < len(b); i++ {
		switch c := b[i]; {
		case c == '"':
			return i + 1
		case c == '\\':
			if i++; i == len(b) || !fieldByte(b[i]) {
				return -1
			}
		case !fieldByte(c):
			return -1
		}
	}
	return -1
}

// fieldByte reports HTAB, SP, VCHAR or obs-text: what a field value,
// quoted-string or reason phrase may hold.
func fieldByte(c byte) bool { return c == '\t' || (c >= ' ' && c != 0x7f) }
