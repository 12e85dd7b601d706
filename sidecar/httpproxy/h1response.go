package httpproxy

import (
	"bytes"
	"errors"
)

// Response heads on the fast path: parsed strictly (anything net/http's
// client would frame differently is refused), relayed with the framing
// the proxy writes itself.

// errBadResponse marks a response head the proxy cannot relay.
var errBadResponse = errors.New("malformed HTTP/1 response from upstream")

// resHead is a parsed response head.
type resHead struct {
	raw           []byte
	status        int
	reason        []byte
	minor         byte
	contentLength int64 // -1: none
	chunked       bool
	grpcStatus    []byte
	conn          connHeaders
	proxyError    []byte // plexus-proxy-error: the answer of a meshed peer's proxy
}

// parseResponse parses a response head as found by headEnd. Lines may end
// in a bare LF (net/http's client accepts them too).
func parseResponse(raw []byte) (resHead, error) {
	h := resHead{raw: raw, contentLength: -1}
	nl := bytes.IndexByte(raw, '\n')
	line := bytes.TrimSuffix(raw[:nl], []byte("\r"))
	if len(line) < 12 || string(line[:7]) != "HTTP/1." || line[8] != ' ' ||
		(len(line) > 12 && line[12] != ' ') {
		return h, errBadResponse
	}
	h.minor = line[7]
	for _, c := range line[9:12] {
		if c < '0' || c > '9' {
			return h, errBadResponse
		}
		h.status = h.status*10 + int(c-'0')
	}
	if h.status < 100 || h.minor < '0' || h.minor > '9' {
		return h, errBadResponse
	}
	if len(line) > 13 {
		h.reason = line[13:]
	}
	for _, c := range h.reason {
		if !fieldByte(c) {
			return h, errBadResponse
		}
	}
	var err error
	lengths, codings := 0, 0
	forEachLine(raw[nl+1:], func(line []byte) bool {
		name, v, ok := splitHeader(line)
		if !ok {
			err = errBadResponse
			return false
		}
		switch {
		case is(name, "content-length"):
			if !addLength(&h.contentLength, &lengths, v) {
				err = errBadResponse
				return false
			}
		case is(name, "transfer-encoding"):
			// Like net/http's client, only one field saying exactly
			// "chunked"; anything else is not relayed. HTTP/1.0 has no
			// transfer codings (net/http would read until close).
			if codings++; codings > 1 || !is(v, "chunked") || h.minor != '1' {
				err = errBadResponse
				return false
			}
			h.chunked = true
		case is(name, "connection"):
			h.conn.add(v)
		case is(name, "grpc-status"):
			h.grpcStatus = v
		case h.status >= 500 && is(name, ErrorHeader):
			h.proxyError = v
		}
		return true
	})
	if h.chunked {
		// RFC 9112 §6.3: chunked wins over Content-Length, which the
		// proxy then does not forward (it writes the framing itself).
		h.contentLength = -1
	}
	return h, err
}

// forEachLine calls f with each line of b (CRLF or LF ended), stopping at
// the empty line or when f returns false.
func forEachLine(b []byte, f func(line []byte) bool) {
	for len(b) > 0 {
		j := bytes.IndexByte(b, '\n')
		if j < 0 {
			return
		}
		line := bytes.TrimSuffix(b[:j], []byte("\r"))
		b = b[j+1:]
		if len(line) == 0 || !f(line) {
			return
		}
	}
}

// bodyless reports a response that has no body whatever its headers say
// (head: it answers a HEAD request).
func (h *resHead) bodyless(head bool) bool {
	return head || h.status == 204 || h.status == 304 || h.status < 200
}

// untilClose reports a response body delimited by the connection's end.
func (h *resHead) untilClose(head bool) bool {
	return !h.bodyless(head) && !h.chunked && h.contentLength < 0
}

// reusable reports whether the upstream connection may carry another
// request after this response.
func (h *resHead) reusable(head bool) bool {
	return h.minor == '1' && !h.conn.close && !h.untilClose(head)
}

// appendClient appends the head to send the client: an HTTP/1.1 status
// line with the upstream's code and reason, the end-to-end headers, the
// framing, and Connection: close when the proxy will close.
func (h *resHead) appendClient(b []byte, closing bool) []byte {
	b = append(b, "HTTP/1.1 "...)
	b = append(b, byte('0'+h.status/100), byte('0'+h.status/10%10), byte('0'+h.status%10), ' ')
	b = append(b, h.reason...)
	b = append(b, '\r', '\n')
	forEachLine(h.raw[bytes.IndexByte(h.raw, '\n')+1:], func(line []byte) bool {
		name, _, _ := splitHeader(line)
		if !dropped(name, &h.conn) {
			b = append(b, line...)
			b = append(b, '\r', '\n')
		}
		return true
	})
	if h.status >= 200 && h.status != 204 {
		// For HEAD and 304 the framing describes the body a GET would
		// get; it is relayed all the same.
		b = appendFraming(b, h.chunked, h.contentLength)
	}
	if closing && h.status >= 200 {
		b = append(b, "Connection: close\r\n"...)
	}
	return append(b, '\r', '\n')
}
