package httpproxy

import (
	"bytes"
	"io"
	"strconv"

	"github.com/plexus-mesh/plexus/sidecar/detect"
)

// Relaying bodies on the fast path: by length, until close, or chunked
// (the proxy writes the chunk framing itself; see copyChunked).

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
	// n counts the body bytes relayed (chunk framing and trailers not
	// included), for a tap.
	n int64
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
	c.n += int64(take)
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
			c.n += int64(m)
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
	c.n += int64(len(c.r.buffered()))
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
			c.n += int64(m)
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

// validChunkExt reports whether b is a well-formed chunk-ext. Whitespace
// may end the line but not come before a ';' (RFC 9112 allows it there;
// net/http's chunked reader does not, and the fast path accepts nothing
// its reference refuses).
func validChunkExt(b []byte) bool {
	for {
		if t := trimBWS(b); len(t) == 0 {
			return true
		} else if len(t) != len(b) || b[0] != ';' {
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
