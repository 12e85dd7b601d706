package h1diff

import (
	"strings"
	"time"
)

// responseCase is what the scripted origin writes in answer to the one
// request a client sends, "GET /r" (or method /r); a good response's body
// is the strict origin's echo, "GET /r 0".
type responseCase struct {
	name   string
	sends  string // short, for testdata/outcomes.md
	method string // GET when empty
	script script
}

// ok is a correct answer to GET /r; extra an unsolicited response.
const (
	ok    = "HTTP/1.1 200 OK\r\nX-Origin: script\r\nContent-Length: 8\r\n\r\nGET /r 0"
	extra = "HTTP/1.1 200 OK\r\nX-Origin: script\r\nContent-Length: 15\r\n\r\nEXTRA /extra 0\n"
)

// now is a script of pieces written without pauses, in one write.
func now(data ...string) script {
	return script{steps: []step{{data: strings.Join(data, "")}}}
}

// closing is now, then the origin closes the connection.
func closing(data ...string) script {
	s := now(data...)
	s.close = true
	return s
}

var responseCases = []responseCase{
	{name: "http10-chunked", sends: "HTTP/1.0 response with TE chunked", script: closing("HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nGET /r 0\r\n0\r\n\r\n")},
	{name: "te-chunked-chunked", sends: "`Transfer-Encoding: chunked, chunked`", script: now("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n8\r\nGET /r 0\r\n0\r\n\r\n")},
	{name: "te-two-fields", sends: "two `Transfer-Encoding: chunked` fields", script: now("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nGET /r 0\r\n0\r\n\r\n")},
	{name: "ok", sends: "a correct response", script: now(ok)},
	{name: "peer-proxy-error", sends: "a 502 with `plexus-proxy-error: connect-refused` (not a meshed peer: relayed, never re-sent)", script: now("HTTP/1.1 502 Bad Gateway\r\nPlexus-Proxy-Error: connect-refused\r\nContent-Length: 8\r\n\r\nGET /r 0")},
	{name: "extra-response", sends: "a second, unsolicited response in the same write", script: now(ok, extra)},
	{name: "extra-garbage", sends: "garbage after the response, same write", script: now(ok, "garbage\r\n\r\n")},
	{name: "extra-response-late", sends: "an unsolicited response 300 ms after an on-time one", script: script{steps: []step{
		{data: ok}, {pause: 300 * time.Millisecond, data: extra},
	}}},
	{name: "head-with-body", sends: "body on a HEAD response", method: "HEAD", script: now(ok)},
	{name: "204-with-body", sends: "204 with CL 15 and a body", script: now("HTTP/1.1 204 No Content\r\nContent-Length: 15\r\n\r\nEXTRA /extra 0\n")},
	{name: "304-with-body", sends: "304 with CL 15 and a body", script: now("HTTP/1.1 304 Not Modified\r\nX-Origin: script\r\nContent-Length: 15\r\n\r\nEXTRA /extra 0\n")},
	{name: "conn-content-length", sends: "`Connection: Content-Length`, CL 8", script: now("HTTP/1.1 200 OK\r\nConnection: Content-Length\r\nContent-Length: 8\r\n\r\nGET /r 0")},
	{name: "conn-transfer-encoding", sends: "`Connection: Transfer-Encoding`, chunked", script: now("HTTP/1.1 200 OK\r\nConnection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nGET /r 0\r\n0\r\n\r\n")},
	{name: "cl-and-chunked", sends: "CL 100 and TE chunked", script: now("HTTP/1.1 200 OK\r\nContent-Length: 100\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nGET /r 0\r\n0\r\n\r\n")},
	{name: "te-gzip-and-cl", sends: "TE gzip and CL 8, then close after 100 ms", script: script{steps: []step{
		{data: "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 8\r\n\r\nGET /r 0"}, {pause: 100 * time.Millisecond},
	}, close: true}},
	{name: "two-content-lengths", sends: "CL 8 and CL 23", script: now("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nContent-Length: 23\r\n\r\nGET /r 0", extra)},
	{name: "reason-ctl", sends: "reason phrase with a control byte", script: now("HTTP/1.1 200 O\x01K\r\nContent-Length: 8\r\n\r\nGET /r 0")},
	{name: "reason-nul", sends: "reason phrase with NUL", script: now("HTTP/1.1 200 O\x00K\r\nContent-Length: 8\r\n\r\nGET /r 0")},
	{name: "bare-lf-head", sends: "status line and fields end in bare LF", script: now("HTTP/1.1 200 OK\nContent-Length: 8\n\nGET /r 0")},
	{name: "header-nul", sends: "NUL in a header value", script: now("HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 8\r\n\r\nGET /r 0")},
	{name: "obs-fold", sends: "obs-folded header", script: now("HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 8\r\n\r\nGET /r 0")},
	{name: "cl-space-before-colon", sends: "`Content-Length : 8`", script: now("HTTP/1.1 200 OK\r\nContent-Length : 8\r\n\r\nGET /r 0", extra)},
	{name: "bad-status-line", sends: "`HTTTP/1.1 200 OK`", script: now("HTTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nGET /r 0")},
	{name: "many-1xx", sends: "50 × 103 Early Hints, then the response", script: now(strings.Repeat("HTTP/1.1 103 Early Hints\r\n\r\n", 50), ok)},
	{name: "100-then-final", sends: "100 Continue, then the response", script: now("HTTP/1.1 100 Continue\r\n\r\n", ok)},
	{name: "unsolicited-101", sends: "101 Switching Protocols to a plain GET", script: now("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n", ok)},
	{name: "slow-body", sends: "CL 8, body in 3 pieces 200 ms apart", script: script{steps: []step{
		{data: "HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nGET"},
		{pause: 200 * time.Millisecond, data: " /r"},
		{pause: 200 * time.Millisecond, data: " 0"},
	}}},
	{name: "close-delimited", sends: "no length, body until close", script: closing("HTTP/1.1 200 OK\r\n\r\nGET /r 0")},
	{name: "http10-close-delimited", sends: "HTTP/1.0, no length, body until close", script: closing("HTTP/1.0 200 OK\r\n\r\nGET /r 0")},
	{name: "close-then-extra", sends: "`Connection: close`, then an extra response, not closed", script: now("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 8\r\n\r\nGET /r 0", extra)},
	{name: "chunked-ext", sends: "chunked with extensions", script: now("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3;a=b\r\nGET\r\n5;q=\"x;y\"\r\n /r 0\r\n0\r\n\r\n")},
	{name: "chunked-trailer", sends: "chunked with a trailer", script: now("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-T\r\n\r\n8\r\nGET /r 0\r\n0\r\nX-T: 1\r\n\r\n")},
	{name: "chunked-bad-size", sends: "chunked with size `zz`", script: now("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nGET /r 0\r\n0\r\n\r\n")},
	{name: "chunked-bare-lf", sends: "chunk lines end in bare LF", script: now("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\nGET /r 0\n0\n\n")},
	{name: "cl-short-of-body", sends: "CL 8, 23 body bytes", script: now("HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nGET /r 0EXTRA /extra 0\n")},
}
