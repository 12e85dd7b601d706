package h1diff

import (
	"fmt"
	"strings"
)

// requestCase is raw bytes a client writes on one connection and the
// requests it means them to be ("METHOD target"). Where a message is
// invalid, want still names it: the client sent it as a request, and the
// proxy may answer it with a 4xx and close. Bytes that are a request only
// under a misreading of the framing are not in want; their target is
// /smuggled.
//
// Where RFC 9112 allows two readings (obs-fold or bare CR: reject, or
// replace with SP) the bytes after are chosen so that both readings agree
// on what is a request.
type requestCase struct {
	name  string
	sends string // short, for testdata/outcomes.md
	raw   string
	want  []string
}

// smuggled is a complete request hidden in a body; 35 bytes, the
// Content-Length of the reported repro.
const smuggled = "GET /smuggled HTTP/1.1\r\nHost: s\r\n\r\n"

// nextB is a genuine second request, pipelined.
const nextB = "GET /b HTTP/1.1\r\nHost: s\r\n\r\n"

// post is "POST /a" with the given header lines (each ending in CRLF) and
// body.
func post(headers, body string) string {
	return "POST /a HTTP/1.1\r\nHost: s\r\n" + headers + "\r\n" + body
}

// get is "GET /a" with the given header lines.
func get(headers string) string {
	return "GET /a HTTP/1.1\r\nHost: s\r\n" + headers + "\r\n"
}

// withSmuggled is POST /a with the header lines, a Content-Length:
// value line, and smuggled as its body: read by that Content-Length the
// body is the smuggled bytes; if the length is dropped or misread they
// become a request.
func withSmuggled(headers, length string) string {
	return post(headers+"Content-Length: "+length+"\r\n", smuggled)
}

// clte is POST /a with a Transfer-Encoding header line te and a
// Content-Length covering "0\r\n\r\n" + smuggled: read as chunked, the
// body ends at the last chunk and smuggled follows. RFC 9112 §6.1: with
// both fields the server MUST close the connection after responding, so
// smuggled is never a request.
func clte(te string) string {
	body := "0\r\n\r\n" + smuggled
	return post(te+fmt.Sprintf("Content-Length: %d\r\n", len(body)), body)
}

// tecl is POST /a with a Transfer-Encoding header line te, a chunked body
// whose one chunk is smuggled, and a Content-Length covering only the
// first chunk-size line: read by the length, smuggled follows the body.
func tecl(te string) string {
	size := fmt.Sprintf("%x\r\n", len(smuggled))
	body := size + smuggled + "\r\n0\r\n\r\n"
	return post(te+fmt.Sprintf("Content-Length: %d\r\n", len(size)), body)
}

// chunkedPost is POST /a, Transfer-Encoding: chunked, with body as given.
func chunkedPost(body string) string {
	return post("Transfer-Encoding: chunked\r\n", body)
}

var (
	postA = []string{"POST /a"}
	getA  = []string{"GET /a"}
	getAB = []string{"GET /a", "GET /b"}
)

var longTarget = "/a?" + strings.Repeat("q", 9000)

var requestCases = []requestCase{
	// Plain requests: the control group.
	{"get", "GET", get(""), getA},
	{"post-cl", "POST, CL 5", post("Content-Length: 5\r\n", "hello"), postA},
	{"post-chunked", "POST, chunked", chunkedPost("5\r\nhello\r\n0\r\n\r\n"), postA},
	{"post-cl-body-is-request", "POST, CL 35, body looks like a request", withSmuggled("", "35"), postA},
	{"post-chunked-body-is-request", "POST, chunked, chunk looks like a request", chunkedPost(fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)), postA},
	{"get-with-body", "GET with CL 5 body", get("Content-Length: 5\r\n") + "hello", getA},

	// Content-Length: repeated, listed, malformed.
	{"cl-repeated-same", "CL 35 twice", withSmuggled("Content-Length: 35\r\n", "35"), postA},
	{"cl-list-same", "CL `35, 35`", withSmuggled("", "35, 35"), postA},
	{"cl-two-different", "CL 0 and CL 35", withSmuggled("Content-Length: 0\r\n", "35"), postA},
	{"cl-list-different", "CL `0, 35`", withSmuggled("", "0, 35"), postA},
	{"cl-plus", "CL `+35`", withSmuggled("", "+35"), postA},
	{"cl-minus", "CL `-1`", withSmuggled("", "-1"), postA},
	{"cl-hex", "CL `0x23`", withSmuggled("", "0x23"), postA},
	{"cl-huge", "CL 20 digits", withSmuggled("", "99999999999999999999"), postA},
	{"cl-leading-zeros", "CL `0035`", withSmuggled("", "0035"), postA},
	{"cl-inner-space", "CL `3 5`", withSmuggled("", "3 5"), postA},
	{"cl-empty", "CL empty", withSmuggled("", ""), postA},
	{"cl-space-before-colon", "`Content-Length : 35`", post("Content-Length : 35\r\n", smuggled), postA},

	// Transfer-Encoding with Content-Length, and obfuscated.
	{"te-cl", "TE chunked + CL (CL.TE)", clte("Transfer-Encoding: chunked\r\n"), postA},
	{"te-cl-short", "TE chunked + short CL (TE.CL)", tecl("Transfer-Encoding: chunked\r\n"), postA},
	{"te-spaces-cl", "TE `  chunked ` + CL", clte("Transfer-Encoding:   chunked  \r\n"), postA},
	{"te-tab-cl", "TE `chunked<TAB>` + CL", clte("Transfer-Encoding: chunked\t\r\n"), postA},
	{"te-upper-cl", "TE `CHUNKED` + CL", clte("Transfer-Encoding: CHUNKED\r\n"), postA},
	{"te-chunked-identity-cl", "TE `chunked, identity` + CL", clte("Transfer-Encoding: chunked, identity\r\n"), postA},
	{"te-identity-chunked-cl", "TE `identity, chunked` + CL", clte("Transfer-Encoding: identity, chunked\r\n"), postA},
	{"te-gzip-chunked-cl", "TE `gzip, chunked` + CL", clte("Transfer-Encoding: gzip, chunked\r\n"), postA},
	{"te-xchunked-cl", "TE `xchunked` + CL", clte("Transfer-Encoding: xchunked\r\n"), postA},
	{"te-xchunked-cl-short", "TE `xchunked` + short CL", tecl("Transfer-Encoding: xchunked\r\n"), postA},
	{"te-twice-cl", "TE chunked twice + CL", clte("Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n"), postA},
	{"te-then-identity-cl", "TE chunked, TE identity + CL", clte("Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n"), postA},
	{"te-space-before-colon-cl", "`Transfer-Encoding : chunked` + CL", clte("Transfer-Encoding : chunked\r\n"), postA},
	{"te-vtab-cl", "TE `<VT>chunked` + CL", clte("Transfer-Encoding:\x0bchunked\r\n"), postA},
	{"te-folded-cl", "TE obs-folded + CL", clte("Transfer-Encoding:\r\n chunked\r\n"), postA},
	{"te-xchunked-only", "TE `xchunked`, no CL", post("Transfer-Encoding: xchunked\r\n", "0\r\n\r\n"+smuggled), postA},
	{"te-http10-cl", "HTTP/1.0, TE chunked + CL", strings.Replace(clte("Transfer-Encoding: chunked\r\n"), "HTTP/1.1", "HTTP/1.0", 1), postA},
	{"te-http10", "HTTP/1.0, TE chunked", "POST /a HTTP/1.0\r\nHost: s\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n", postA},

	// Framing headers named in Connection.
	{"conn-content-length", "`Connection: Content-Length`, CL 35 (the reported repro)", "POST /a HTTP/1.1\r\nHost: s\r\nConnection: Content-Length\r\nContent-Length: 35\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: s\r\n\r\n", postA},
	{"conn-keepalive-content-length", "`Connection: keep-alive, content-length`, CL 35", withSmuggled("Connection: keep-alive, content-length\r\n", "35"), postA},
	{"conn-many-content-length", "`Connection:` 9 names + Content-Length, CL 35", withSmuggled("Connection: a, b, c, d, e, f, g, h, i, Content-Length\r\n", "35"), postA},
	{"conn-content-length-get", "GET, `Connection: Content-Length`, CL 0", get("Connection: Content-Length\r\nContent-Length: 0\r\n"), getA},
	{"conn-transfer-encoding", "`Connection: Transfer-Encoding`, chunked", post("Connection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n", fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(smuggled), smuggled)), postA},
	{"conn-transfer-encoding-cl", "`Connection: Transfer-Encoding`, TE + CL", clte("Connection: Transfer-Encoding\r\nTransfer-Encoding: chunked\r\n"), postA},
	{"conn-host", "`Connection: Host`", get("Connection: Host\r\n"), getA},

	// Chunk sizes and extensions.
	{"chunk-size-leading-space", "chunk size ` 5`", chunkedPost(" 5\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-size-trailing-space", "chunk size `5 `", chunkedPost("5 \r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-size-0x", "chunk size `0x5`", chunkedPost("0x5\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-size-overflow", "chunk size 2^64+5 (17 hex digits)", chunkedPost("10000000000000005\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-size-zeros", "chunk size 5 with 18 leading zeros", chunkedPost(strings.Repeat("0", 18) + "5\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-size-negative", "chunk size `-5`", chunkedPost("-5\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-size-upper", "chunk size `A`", chunkedPost("A\r\nhelloworld\r\n0\r\n\r\n"), postA},
	{"chunk-ext", "chunk extensions", chunkedPost("5;a=b\r\nhello\r\n0;c\r\n\r\n"), postA},
	{"chunk-ext-quoted", "quoted chunk extension with `;`", chunkedPost("5;a=\"x;y\"\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-ext-bare-cr", "bare CR in a chunk extension", chunkedPost("5;a\rb\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-ext-bare-lf", "bare LF ends a chunk extension", chunkedPost("5;a\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-ext-nul", "NUL in a chunk extension", chunkedPost("5;a\x00\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-ext-bws", "chunk extension with spaces around `;` and `=`", chunkedPost("5 ; a = b\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-ext-quoted-escape", "quoted chunk extension with an escaped quote", chunkedPost("5;a=\"x\\\"y\"\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-ext-unterminated", "chunk extension with an unterminated quote", chunkedPost("5;a=\"xy\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-ext-no-name", "chunk extension `;=x` (no name)", chunkedPost("5;=x\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-no-crlf-after-data", "no CRLF after chunk data", chunkedPost("5\r\nhello0\r\n\r\n"), postA},
	{"chunk-data-too-long", "chunk data longer than its size", chunkedPost("3\r\nhello\r\n0\r\n\r\n"), postA},
	{"chunk-bare-lf", "chunk lines end in bare LF", chunkedPost("5\nhello\n0\n\n"), postA},
	{"chunk-trailer", "trailer field", chunkedPost("5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n"), postA},
	{"chunk-trailer-request", "trailer section holds a request line", chunkedPost("0\r\nX: y\r\n" + smuggled), postA},
	{"chunk-trailer-bare-lf", "trailer line ends in bare LF", chunkedPost("0\r\nX: y\n\r\n"), postA},

	// Heads: bare CR/LF, NUL, folding, malformed lines.
	{"bare-lf-head", "head lines end in bare LF", "GET /a HTTP/1.1\nHost: s\n\n", getA},
	{"bare-lf-in-head", "one header line ends in bare LF", "GET /a HTTP/1.1\r\nHost: s\nX: y\r\n\r\n", getA},
	{"bare-cr-in-value", "bare CR in a header value", get("X: a\rb\r\n"), getA},
	{"bare-cr-hides-cl", "`X: y<CR>Content-Length: 28`, then GET /b", get("X: y\rContent-Length: 28\r\n") + nextB, getAB},
	{"nul-in-value", "NUL in a header value", get("X: a\x00b\r\n"), getA},
	{"nul-in-name", "NUL in a header name", get("X\x00Y: a\r\n"), getA},
	{"obs-fold", "obs-folded header", get("X: a\r\n b\r\n"), getA},
	{"obs-fold-hides-cl", "obs-fold ` Content-Length: 28`, then GET /b", get("X: y\r\n Content-Length: 28\r\n") + nextB, getAB},
	{"header-no-colon", "header line without colon", get("nocolon\r\n"), getA},
	{"leading-crlf", "empty line before the request", "\r\n" + get(""), getA},
	{"request-line-double-space", "`GET  /a HTTP/1.1`", "GET  /a HTTP/1.1\r\nHost: s\r\n\r\n", getA},
	{"request-line-tab", "`GET<TAB>/a HTTP/1.1`", "GET\t/a HTTP/1.1\r\nHost: s\r\n\r\n", getA},
	{"nul-in-target", "NUL in the target", "GET /a\x00 HTTP/1.1\r\nHost: s\r\n\r\n", getA},
	{"method-lowercase", "`get /a`", "get /a HTTP/1.1\r\nHost: s\r\n\r\n", []string{"get /a"}},

	// Pipelining and the end of a connection.
	{"pipeline-2", "GET /a, GET /b in one write", get("") + nextB, getAB},
	{"pipeline-3", "GET /a, POST /b CL 5, GET /c in one write", get("") + "POST /b HTTP/1.1\r\nHost: s\r\nContent-Length: 5\r\n\r\nhello" + "GET /c HTTP/1.1\r\nHost: s\r\n\r\n", []string{"GET /a", "POST /b", "GET /c"}},
	{"pipeline-chunked", "POST /a chunked, GET /b in one write", chunkedPost("5\r\nhello\r\n0\r\n\r\n") + nextB, []string{"POST /a", "GET /b"}},
	{"pipeline-head", "HEAD /a, GET /b in one write", "HEAD /a HTTP/1.1\r\nHost: s\r\n\r\n" + nextB, []string{"HEAD /a", "GET /b"}},
	{"close-then-more", "`Connection: close`, then another request", get("Connection: close\r\n") + smuggled, getA},
	{"http10-then-more", "HTTP/1.0 (closes), then another request", "GET /a HTTP/1.0\r\nHost: s\r\n\r\n" + smuggled, getA},
	{"http10-keep-alive", "two HTTP/1.0 keep-alive requests", "GET /a HTTP/1.0\r\nHost: s\r\nConnection: keep-alive\r\n\r\nGET /b HTTP/1.0\r\nHost: s\r\nConnection: keep-alive\r\n\r\n", getAB},
	{"http10-post", "HTTP/1.0 POST, CL 5", "POST /a HTTP/1.0\r\nHost: s\r\nContent-Length: 5\r\n\r\nhello", postA},

	// Expect and Upgrade.
	{"expect-100-body", "`Expect: 100-continue`, CL 5, body sent at once", post("Expect: 100-continue\r\nContent-Length: 5\r\n", "hello"), postA},
	{"expect-100-no-body", "GET, `Expect: 100-continue`", get("Expect: 100-continue\r\n"), getA},
	{"expect-100-pipelined", "`Expect: 100-continue` POST, then GET /b", post("Expect: 100-continue\r\nContent-Length: 5\r\n", "hello") + nextB, []string{"POST /a", "GET /b"}},
	{"expect-unknown", "`Expect: foo`", get("Expect: foo\r\n"), getA},
	{"upgrade-websocket", "WebSocket upgrade (origin declines)", get("Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"), getA},
	{"upgrade-no-connection", "`Upgrade: websocket` without Connection, then GET /b", get("Upgrade: websocket\r\n") + nextB, getAB},
	{"upgrade-with-body", "WebSocket upgrade on a POST, CL 35", withSmuggled("Connection: Upgrade\r\nUpgrade: websocket\r\n", "35"), postA},
	{"upgrade-h2c", "h2c upgrade", get("Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n"), getA},

	// Targets, Host, sizes.
	{"absolute-form", "`GET http://s/a`", "GET http://s/a HTTP/1.1\r\nHost: s\r\n\r\n", getA},
	{"absolute-form-other-host", "`GET http://t/a`, Host: s", "GET http://t/a HTTP/1.1\r\nHost: s\r\n\r\n", getA},
	{"asterisk-form", "`OPTIONS *`", "OPTIONS * HTTP/1.1\r\nHost: s\r\n\r\n", []string{"OPTIONS *"}},
	{"missing-host", "no Host", "GET /a HTTP/1.1\r\n\r\n", getA},
	{"duplicate-host", "Host twice", get("Host: t\r\n"), getA},
	{"long-header", "one 6000-byte header", get("X-Long: " + strings.Repeat("a", 6000) + "\r\n"), getA},
	{"huge-header", "one 70 KiB header", get("X-Huge: " + strings.Repeat("a", 70<<10) + "\r\n"), getA},
	{"many-headers", "150 headers", get(strings.Repeat("X-Many: 1\r\n", 150)), getA},
	{"long-request-line", "9 KiB request line", "GET " + longTarget + " HTTP/1.1\r\nHost: s\r\n\r\n", []string{"GET " + longTarget}},
}
