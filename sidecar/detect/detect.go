// Package detect classifies an accepted connection as HTTP/2 (prior
// knowledge), HTTP/1.x or opaque TCP from its first bytes, and replays them.
package detect

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/sockio"
)

// Protocol is the result of detection.
type Protocol uint8

// The protocols Detect distinguishes.
const (
	Opaque Protocol = iota
	HTTP1
	HTTP2
)

func (p Protocol) String() string {
	switch p {
	case HTTP1:
		return "http/1"
	case HTTP2:
		return "h2"
	default:
		return "opaque"
	}
}

// MaxPeek bounds how many bytes detection reads before it gives up and
// classifies the connection as opaque. A request line longer than this is
// forwarded as opaque TCP (still correct, but without HTTP metrics).
const MaxPeek = 8 << 10

// Preface is the HTTP/2 client connection preface (RFC 9113 §3.4).
const Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// Classify decides from a connection's first bytes. done is false when b is
// too short to decide; callers then read more, and treat a full MaxPeek
// buffer, a timeout or EOF as Opaque.
func Classify(b []byte) (p Protocol, done bool) {
	if len(b) == 0 {
		return Opaque, false
	}
	if len(b) < len(Preface) {
		if hasPrefix(Preface, b) {
			return Opaque, false
		}
	} else if string(b[:len(Preface)]) == Preface {
		return HTTP2, true
	}
	_, _, err := ParseRequestLine(b)
	switch {
	case err == nil:
		return HTTP1, true
	case errors.Is(err, ErrShort):
		return Opaque, len(b) >= MaxPeek
	default:
		return Opaque, true
	}
}

// Detector reads the first bytes of connections with pooled buffers.
// The zero value is not usable; use New.
type Detector struct {
	timeout time.Duration
	pool    sync.Pool
}

// New returns a Detector that waits at most timeout for a decision.
func New(timeout time.Duration) *Detector {
	return &Detector{
		timeout: timeout,
		pool:    sync.Pool{New: func() any { return new([MaxPeek]byte) }},
	}
}

// Detect reads from c until Classify decides, MaxPeek bytes are buffered,
// the detection timeout passes (a client waiting for the server to speak
// first: Opaque) or the client closes its side (Opaque). It returns a
// Conn that replays every byte read. The read deadline is cleared again.
// A read error other than timeout or EOF is returned with c unwrapped.
func (d *Detector) Detect(c net.Conn) (Protocol, *Conn, error) {
	buf := d.pool.Get().(*[MaxPeek]byte)
	if err := c.SetReadDeadline(time.Now().Add(d.timeout)); err != nil {
		d.pool.Put(buf)
		return Opaque, nil, fmt.Errorf("detect: set deadline: %w", err)
	}
	n, proto := 0, Opaque
	for {
		m, err := c.Read(buf[n:])
		n += m
		if p, done := Classify(buf[:n]); done {
			proto = p
			break
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, io.EOF) {
				break
			}
			d.pool.Put(buf)
			return Opaque, nil, fmt.Errorf("detect: read after %d bytes: %w", n, err)
		}
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		d.pool.Put(buf)
		return Opaque, nil, fmt.Errorf("detect: clear deadline: %w", err)
	}
	pc := &Conn{Conn: c, d: d, buf: buf, data: buf[:n]}
	if n == 0 {
		pc.release()
	}
	return proto, pc, nil
}

// Conn is a connection whose first bytes, read by detection, are returned
// by Read before the rest of the stream.
type Conn struct {
	net.Conn
	d    *Detector
	buf  *[MaxPeek]byte
	data []byte
}

// Read returns replayed bytes first, then reads from the connection.
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.data) > 0 {
		n := copy(p, c.data)
		c.data = c.data[n:]
		if len(c.data) == 0 {
			c.release()
		}
		return n, nil
	}
	return c.Conn.Read(p)
}

// Peeked returns the bytes not yet replayed. They are valid until the next Read.
func (c *Conn) Peeked() []byte { return c.data }

// CloseWrite half-closes the underlying connection when it supports it.
func (c *Conn) CloseWrite() error { return sockio.CloseWrite(c.Conn) }

func (c *Conn) release() {
	if c.buf != nil {
		c.d.pool.Put(c.buf)
		c.buf, c.data = nil, nil
	}
}
