package httpproxy

import (
	"bytes"
	"strconv"

	"github.com/plexus-mesh/plexus/sidecar/detect"
)

// The HTTP/1.1 fast path (h1*.go) forwards plain keep-alive requests
// without net/http: it parses each head itself, forwards it with the
// hop-by-hop headers removed and relays bodies with their framing intact.
// Anything it does not handle exactly as net/http would (see
// reqHead.plain) goes to the net/http server instead, whole connection
// and every byte already read.

// maxConnTokens bounds the header names a Connection header may list on
// the fast path; more goes to net/http.
const maxConnTokens = 8

// headEnd returns the length of the head at the start of b (through the
// empty line), or -1 when b holds no complete head yet. Lines may end in
// CRLF or a bare LF.
func headEnd(b []byte) int {
	for i := 0; ; {
		j := bytes.IndexByte(b[i:], '\n')
		if j < 0 {
			return -1
		}
		k := i + j + 1
		switch {
		case k < len(b) && b[k] == '\n':
			return k + 1
		case k+1 < len(b) && b[k] == '\r' && b[k+1] == '\n':
			return k + 2
		}
		i = k
	}
}

// headerLines calls f with each header line of head (after its first line)
// without its CRLF, stopping at the empty line or when f returns false.
// It reports false when a line does not end in CRLF.
func headerLines(head []byte, f func(line []byte) bool) bool {
	i := bytes.IndexByte(head, '\n') + 1
	for i < len(head) {
		j := bytes.IndexByte(head[i:], '\n')
		if j < 1 || head[i+j-1] != '\r' {
			return false
		}
		line := head[i : i+j-1]
		i += j + 1
		if len(line) == 0 {
			return true
		}
		if !f(line) {
			return true
		}
	}
	return true
}

// splitHeader splits "Name: value" into the name and the value with
// optional whitespace trimmed; ok is false when the line is not a valid
// field (RFC 9112 §5: a token, a colon, a value of visible characters,
// spaces and tabs).
func splitHeader(line []byte) (name, value []byte, ok bool) {
	colon := bytes.IndexByte(line, ':')
	if colon < 1 {
		return nil, nil, false
	}
	for _, c := range line[:colon] {
		if !detect.IsTchar(c) {
			return nil, nil, false
		}
	}
	value = line[colon+1:]
	for _, c := range value {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return nil, nil, false
		}
	}
	return line[:colon], bytes.Trim(value, " \t"), true
}

// is reports whether the header name b is s, ignoring ASCII case; s is
// lower case.
func is(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}

// hopByHopName reports the hop-by-hop headers removeHopByHop drops, except
// Trailer: the fast path relays trailers verbatim, so it keeps their
// announcement. It allocates nothing.
func hopByHopName(name []byte) bool {
	for _, k := range fastPathHopByHop {
		if is(name, k) {
			return true
		}
	}
	return false
}

// framingName reports the headers that frame a body, which the fast path
// never forwards as received: it writes them itself from the framing it
// parsed and relays the body by.
func framingName(name []byte) bool {
	return (len(name) == 14 && is(name, "content-length")) || (len(name) == 17 && is(name, "transfer-encoding"))
}

// dropped reports a header the fast path does not forward: a hop-by-hop
// one, one the Connection header names (except Host, which is end to end
// whatever a peer says), and the framing headers.
func dropped(name []byte, ch *connHeaders) bool {
	return hopByHopName(name) || framingName(name) || (ch.n > 0 && ch.listed(name) && !is(name, "host"))
}

// appendFraming appends the framing header of a body that is chunked, or
// of length n (none when n < 0: no body, or one delimited by close).
func appendFraming(b []byte, chunked bool, n int64) []byte {
	switch {
	case chunked:
		return append(b, "Transfer-Encoding: chunked\r\n"...)
	case n >= 0:
		b = append(b, "Content-Length: "...)
		b = strconv.AppendInt(b, n, 10)
		return append(b, '\r', '\n')
	}
	return b
}

// tokens calls f with each comma-separated token of a header value,
// trimmed; empty ones are skipped.
func tokens(v []byte, f func(tok []byte)) {
	for len(v) > 0 {
		tok := v
		if i := bytes.IndexByte(v, ','); i >= 0 {
			tok, v = v[:i], v[i+1:]
		} else {
			v = nil
		}
		if tok = bytes.Trim(tok, " \t"); len(tok) > 0 {
			f(tok)
		}
	}
}

// parseLength parses a Content-Length value: digits only, no sign, at
// most 18 of them.
func parseLength(v []byte) (int64, bool) {
	if len(v) == 0 || len(v) > 18 {
		return 0, false
	}
	var n int64
	for _, c := range v {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// addLength takes one Content-Length field into length, counting fields
// in seen; false when it is invalid or disagrees with an earlier one.
func addLength(length *int64, seen *int, v []byte) bool {
	n, ok := parseLength(v)
	if !ok || (*seen > 0 && n != *length) {
		return false
	}
	*length = n
	*seen++
	return true
}

// connHeaders is what the Connection header of a head says.
type connHeaders struct {
	close   bool
	upgrade bool
	names   [maxConnTokens][]byte // other listed headers, to drop
	n       int
	tooMany bool
}

func (ch *connHeaders) add(v []byte) {
	tokens(v, func(tok []byte) {
		switch {
		case is(tok, "close"):
			ch.close = true
		case is(tok, "upgrade"):
			ch.upgrade = true
		case is(tok, "keep-alive"):
		case ch.n == maxConnTokens:
			ch.tooMany = true
		default:
			ch.names[ch.n] = tok
			ch.n++
		}
	})
}

// listed reports whether the Connection header named this header.
func (ch *connHeaders) listed(name []byte) bool {
	for _, n := range ch.names[:ch.n] {
		if bytes.EqualFold(n, name) {
			return true
		}
	}
	return false
}

// reqHead is a parsed request head on the fast path.
type reqHead struct {
	// raw and the slices into it are valid until the next read of the
	// connection's buffer (a streamed body reuses it): what is needed
	// later is copied into the pipeline's Request.
	raw           []byte // the whole head, request line to empty line
	method        []byte
	target        []byte
	host          []byte
	contentLength int64 // -1: none
	chunked       bool
	teTrailers    bool
	grpc          bool
	conn          connHeaders
	// plain is false for anything the fast path leaves to net/http: not
	// HTTP/1.1, a target not in origin form, Upgrade or Expect, a missing
	// or repeated Host, framing other than one Content-Length or exactly
	// "chunked", a bare LF, an invalid or folded field.
	plain bool
}

// parseRequest parses the request head raw (as found by headEnd).
func parseRequest(raw []byte) reqHead {
	h := reqHead{raw: raw, contentLength: -1}
	rl, n, err := detect.ParseRequestLine(raw)
	if err != nil || rl.Minor != '1' || len(rl.Target) == 0 || rl.Target[0] != '/' || raw[n-2] != '\r' {
		return h
	}
	h.method, h.target = rl.Method, rl.Target
	hosts, lengths, te := 0, 0, 0
	valid := true
	ok := headerLines(raw, func(line []byte) bool {
		name, v, good := splitHeader(line)
		if !good {
			valid = false
			return false
		}
		switch {
		case is(name, "host"):
			h.host = v
			hosts++
		case is(name, "content-length"):
			if !addLength(&h.contentLength, &lengths, v) {
				valid = false
				return false
			}
		case is(name, "transfer-encoding"):
			te++
			h.chunked = is(v, "chunked")
		case is(name, "connection"):
			h.conn.add(v)
		case is(name, "te"):
			tokens(v, func(tok []byte) {
				if t, _, _ := bytes.Cut(tok, []byte(";")); is(bytes.TrimRight(t, " \t"), "trailers") {
					h.teTrailers = true
				}
			})
		case is(name, "upgrade"), is(name, "expect"):
			valid = false
			return false
		case is(name, "content-type"):
			h.grpc = len(v) >= 16 && is(v[:16], "application/grpc")
		}
		return true
	})
	h.plain = ok && valid && hosts == 1 && !h.conn.upgrade && !h.conn.tooMany &&
		(te == 0 || (te == 1 && h.chunked && lengths == 0))
	return h
}

// Get returns the first value of the named header, for the pipeline.
func (h *reqHead) Get(name string) string {
	var v []byte
	headerLines(h.raw, func(line []byte) bool {
		n, val, _ := splitHeader(line)
		if bytes.EqualFold(n, []byte(name)) {
			v = val
			return false
		}
		return true
	})
	return string(v)
}

// each calls fn with every header field of the request, for a tap.
func (h *reqHead) each(fn func(name, value string)) {
	headerLines(h.raw, func(line []byte) bool {
		n, v, _ := splitHeader(line)
		fn(string(n), string(v))
		return true
	})
}

// length is the bytes of the request, head and body, once its body is
// known to be buffered (Content-Length framing or none).
func (h *reqHead) length() int { return len(h.raw) + int(max(h.contentLength, 0)) }

// hasBody reports whether the request carries a body.
func (h *reqHead) hasBody() bool { return h.chunked || h.contentLength > 0 }

// appendUpstream appends the head to send upstream: the request line and
// every end-to-end header as received, then the framing and TE the proxy
// owns.
func (h *reqHead) appendUpstream(b []byte) []byte {
	i := bytes.IndexByte(h.raw, '\n') + 1
	b = append(b, h.raw[:i]...)
	headerLines(h.raw, func(line []byte) bool {
		name, _, _ := splitHeader(line)
		if !dropped(name, &h.conn) {
			b = append(b, line...)
			b = append(b, '\r', '\n')
		}
		return true
	})
	if h.teTrailers {
		b = append(b, "Te: trailers\r\n"...)
	}
	b = appendFraming(b, h.chunked, h.contentLength)
	return append(b, '\r', '\n')
}
