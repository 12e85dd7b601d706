package mtls

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/mtls/replay"
)

// Kind is what Peek found at the start of an inbound connection.
type Kind uint8

// Peek results.
const (
	// Other: decided, not our mTLS (plaintext, or a TLS ClientHello that
	// does not offer ALPN: the application's own TLS).
	Other Kind = iota
	// Mesh: a TLS ClientHello offering ALPN plexus.mtls.v1.
	Mesh
	// Undecided: the client sent nothing decisive before the timeout or
	// EOF (server-speaks-first protocols); treat as opaque.
	Undecided
)

// MaxHello bounds the bytes Peek buffers (TLS record headers included).
const MaxHello = 16 << 10

const (
	recordHandshake  = 0x16
	typeClientHello  = 1
	extensionALPN    = 16
	recordHeaderSize = 5
)

// errShort means more bytes are needed to decide.
var errShort = errors.New("short")

// OffersALPN decides from a connection's first bytes whether they start a
// TLS ClientHello that offers proto. decided is false when b ends before
// the answer is known. Malformed input is decided: not offered.
func OffersALPN(b []byte, proto string) (offers, decided bool) {
	if len(b) == 0 {
		return false, false
	}
	if b[0] != recordHandshake {
		return false, true
	}
	// Gather the handshake message across records (a ClientHello may be
	// fragmented).
	var msg []byte
	for rest := b; ; {
		if len(rest) < recordHeaderSize {
			return false, len(b) >= MaxHello
		}
		if rest[0] != recordHandshake || rest[1] != 3 {
			return false, true
		}
		n := int(binary.BigEndian.Uint16(rest[3:5]))
		if n == 0 || n > 1<<14 {
			return false, true
		}
		if len(rest) < recordHeaderSize+n {
			msg = append(msg, rest[recordHeaderSize:]...)
			if ok, err := helloOffers(msg, proto); err != errShort {
				return ok, true
			}
			return false, len(b) >= MaxHello
		}
		msg = append(msg, rest[recordHeaderSize:recordHeaderSize+n]...)
		rest = rest[recordHeaderSize+n:]
		if ok, err := helloOffers(msg, proto); err != errShort {
			return ok, true
		}
	}
}

// helloOffers parses a (possibly partial) handshake message; errShort
// when it ends too early, another error when malformed.
func helloOffers(m []byte, proto string) (bool, error) {
	r := reader(m)
	typ, ok := r.u8()
	if !ok {
		return false, errShort
	}
	if typ != typeClientHello {
		return false, errors.New("not a ClientHello")
	}
	n, ok := r.u24()
	if !ok {
		return false, errShort
	}
	if n > MaxHello {
		return false, errors.New("ClientHello too long")
	}
	if len(r) < n {
		// Only decide on the complete message: the ALPN extension comes last-ish.
		return false, errShort
	}
	r = r[:n]
	// legacy_version, random
	if !r.skip(2 + 32) {
		return false, errors.New("truncated")
	}
	if _, ok := r.vec8(); !ok { // session id
		return false, errors.New("bad session id")
	}
	if _, ok := r.vec16(); !ok { // cipher suites
		return false, errors.New("bad cipher suites")
	}
	if _, ok := r.vec8(); !ok { // compression methods
		return false, errors.New("bad compression methods")
	}
	if len(r) == 0 {
		return false, nil // no extensions
	}
	exts, ok := r.vec16()
	if !ok {
		return false, errors.New("bad extensions")
	}
	for len(exts) > 0 {
		typ, ok1 := exts.u16()
		data, ok2 := exts.vec16()
		if !ok1 || !ok2 {
			return false, errors.New("bad extension")
		}
		if typ != extensionALPN {
			continue
		}
		list, ok := data.vec16()
		if !ok {
			return false, errors.New("bad ALPN extension")
		}
		for len(list) > 0 {
			name, ok := list.vec8()
			if !ok {
				return false, errors.New("bad ALPN name")
			}
			if string(name) == proto {
				return true, nil
			}
		}
		return false, nil
	}
	return false, nil
}

type reader []byte

func (r *reader) u8() (int, bool) {
	if len(*r) < 1 {
		return 0, false
	}
	v := (*r)[0]
	*r = (*r)[1:]
	return int(v), true
}

func (r *reader) u16() (int, bool) {
	if len(*r) < 2 {
		return 0, false
	}
	v := binary.BigEndian.Uint16(*r)
	*r = (*r)[2:]
	return int(v), true
}

func (r *reader) u24() (int, bool) {
	if len(*r) < 3 {
		return 0, false
	}
	v := int((*r)[0])<<16 | int((*r)[1])<<8 | int((*r)[2])
	*r = (*r)[3:]
	return v, true
}

func (r *reader) skip(n int) bool {
	if len(*r) < n {
		return false
	}
	*r = (*r)[n:]
	return true
}

func (r *reader) vec(n int, ok bool) (reader, bool) {
	if !ok || len(*r) < n {
		return nil, false
	}
	v := (*r)[:n]
	*r = (*r)[n:]
	return v, true
}

func (r *reader) vec8() (reader, bool)  { return r.vec(r.u8()) }
func (r *reader) vec16() (reader, bool) { return r.vec(r.u16()) }

// Peek reads the start of c, waiting at most timeout, until OffersALPN
// decides for ALPN, and returns what it found with a connection that
// replays every byte read. The read deadline is cleared again. A read
// error other than timeout or EOF is returned.
func Peek(c net.Conn, timeout time.Duration) (Kind, *replay.Conn, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return Other, nil, fmt.Errorf("peek: set deadline: %w", err)
	}
	buf := make([]byte, 0, 2048)
	kind := Undecided
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := c.Read(buf[len(buf):min(cap(buf), MaxHello)])
		buf = buf[:len(buf)+n]
		if offers, decided := OffersALPN(buf, ALPN); decided {
			kind = Other
			if offers {
				kind = Mesh
			}
			break
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, io.EOF) {
				break
			}
			return Other, nil, fmt.Errorf("peek: read after %d bytes: %w", len(buf), err)
		}
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return Other, nil, fmt.Errorf("peek: clear deadline: %w", err)
	}
	return kind, &replay.Conn{Conn: c, Data: buf}, nil
}
