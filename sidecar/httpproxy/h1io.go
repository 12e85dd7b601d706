package httpproxy

import (
	"bytes"
	"errors"
	"io"
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

// h1reader buffers one side of a connection for the fast path.
type h1reader struct {
	c    io.Reader
	buf  []byte
	r, w int
	// got counts bytes read from c since reset (did the peer answer?).
	got int
}

func newReader(c io.Reader, size int) *h1reader {
	return &h1reader{c: c, buf: make([]byte, size)}
}

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
		n, err := b.c.Read(b.buf[b.w:])
		b.w += n
		b.got += n
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

// h1writer batches writes to one side of a connection.
type h1writer struct {
	c   io.Writer
	buf []byte
}

func (w *h1writer) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	_, err := w.c.Write(w.buf)
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
		m, err := c.r.c.Read(c.buf[:min(n, int64(len(c.buf)))])
		c.r.got += m
		if m > 0 {
			if _, werr := c.w.c.Write(c.buf[:m]); werr != nil {
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

// line relays one CRLF-terminated line of at most maxChunkLine bytes and
// returns it without the CRLF.
func (c *copier) line() ([]byte, error) {
	for {
		b := c.r.buffered()
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			if i == 0 || b[i-1] != '\r' {
				return nil, &srcError{errBadChunk}
			}
			line := b[:i-1]
			c.w.buf = append(c.w.buf, b[:i+1]...)
			c.r.discard(i + 1)
			return line, nil
		}
		if len(b) >= maxChunkLine {
			return nil, &srcError{errBadChunk}
		}
		if err := c.more(maxChunkLine); err != nil {
			return nil, err
		}
	}
}

// copyChunked relays a chunked body verbatim: each chunk with its size
// line, the last chunk, the trailers and the final CRLF (RFC 9112 §7.1).
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
	}
}

// trailers relays the trailer section through its empty line.
func (c *copier) trailers() error {
	total := 0
	for {
		line, err := c.line()
		if err != nil {
			return err
		}
		if len(line) == 0 {
			return nil
		}
		if total += len(line); total > maxTrailers {
			return &srcError{errBadChunk}
		}
		if _, _, ok := splitHeader(line); !ok {
			return &srcError{errBadChunk}
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
		m, err := c.r.c.Read(c.buf)
		if m > 0 {
			if _, werr := c.w.c.Write(c.buf[:m]); werr != nil {
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

// chunkSize parses a chunk-size line: hex digits, then optional
// extensions after ';' (ignored).
func chunkSize(line []byte) (int64, bool) {
	if i := bytes.IndexByte(line, ';'); i >= 0 {
		line = line[:i]
	}
	line = bytes.TrimRight(line, " \t")
	if len(line) == 0 || len(line) > 15 {
		return 0, false
	}
	var n int64
	for _, c := range line {
		var d byte
		switch {
		case '0' <= c && c <= '9':
			d = c - '0'
		case 'a' <= c && c <= 'f':
			d = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			d = c - 'A' + 10
		default:
			return 0, false
		}
		n = n<<4 | int64(d)
	}
	return n, true
}
