package httpproxy

import (
	"bufio"
	"bytes"
	"net/http"
	"net/textproto"
	"slices"
	"testing"
)

// headSeeds are request and response heads for the differential fuzz
// targets: plain ones and the ambiguous shapes smuggling is made of.
var headSeeds = []string{
	// A peer proxy's answer (parseResponse reads plexus-proxy-error on a 5xx).
	"HTTP/1.1 502 Bad Gateway\r\nPlexus-Proxy-Error: connect-refused\r\nContent-Length: 0\r\n\r\n",
	"HTTP/1.1 200 OK\r\nplexus-proxy-error: upstream-reset\r\nContent-Length: 0\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: s\r\nConnection: Content-Length\r\nContent-Length: 35\r\n\r\n",
	"POST /a HTTP/1.1\r\nHost: s\r\nConnection: Transfer-Encoding, host\r\nTransfer-Encoding: chunked\r\n\r\n",
	"POST /p?q=1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 3\r\nTe: trailers\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n",
	"GET / HTTP/1.1\r\nHost: x\r\nX: a\r\n b\r\n\r\n",
	"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: content-length\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nContent-Length: 3\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
	"HTTP/1.0 204 No Content\nGrpc-Status: 0\n\n",
	"HTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\n",
	"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked, chunked\r\n\r\n",
	"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
	"HTTP/1.1 200 \x01K\r\nContent-Length: 0\r\n\r\n",
}

// FuzzRequestHeadAgainstNetHTTP: whenever the fast path takes a request
// head, net/http's ReadRequest on the same bytes yields the same method,
// target, Host, header set and body framing; and the head the fast path
// sends upstream frames the body the same way for net/http.
func FuzzRequestHeadAgainstNetHTTP(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		n := headEnd(in)
		if n < 0 {
			return
		}
		h := parseRequest(in[:n])
		if !h.plain {
			return
		}
		ref, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(in[:n])))
		if err != nil {
			t.Fatalf("fast path took a head net/http refuses (%v): %q", err, in[:n])
		}
		if ref.Method != string(h.method) || ref.RequestURI != string(h.target) || ref.Host != string(h.host) {
			t.Fatalf("method/target/host %q %q %q, net/http %q %q %q", h.method, h.target, h.host, ref.Method, ref.RequestURI, ref.Host)
		}
		sameHeaders(t, in[:n], ref.Header, "Host")
		sameFraming(t, h.chunked, h.contentLength, ref.TransferEncoding, ref.ContentLength, 0)
		up := h.appendUpstream(nil)
		out, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(up)))
		if err != nil {
			t.Fatalf("net/http refuses the head sent upstream (%v): %q", err, up)
		}
		if out.Host != ref.Host {
			t.Fatalf("upstream Host %q, want %q", out.Host, ref.Host)
		}
		sameFraming(t, h.chunked, h.contentLength, out.TransferEncoding, out.ContentLength, 0)
	})
}

// FuzzResponseHeadAgainstNetHTTP: whenever the fast path takes a response
// head, net/http's ReadResponse on the same bytes yields the same status,
// header set and body framing; and the head relayed to the client frames
// the body the same way.
func FuzzResponseHeadAgainstNetHTTP(f *testing.F) {
	for _, s := range headSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		n := headEnd(in)
		if n < 0 {
			return
		}
		h, err := parseResponse(in[:n])
		if err != nil {
			return
		}
		get := &http.Request{Method: http.MethodGet}
		ref, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(in[:n])), get)
		if err != nil {
			t.Fatalf("fast path took a response head net/http refuses (%v): %q", err, in[:n])
		}
		if ref.StatusCode != h.status {
			t.Fatalf("status %d, net/http %d", h.status, ref.StatusCode)
		}
		sameHeaders(t, in[:n], ref.Header, "")
		if h.bodyless(false) {
			return
		}
		sameFraming(t, h.chunked, h.contentLength, ref.TransferEncoding, ref.ContentLength, -1)
		out := h.appendClient(nil, false)
		got, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(out)), get)
		if err != nil {
			t.Fatalf("net/http refuses the head relayed to the client (%v): %q", err, out)
		}
		sameFraming(t, h.chunked, h.contentLength, got.TransferEncoding, got.ContentLength, -1)
	})
}

// sameHeaders checks that every field of head (after its first line) is
// in net/http's header under its canonical name, in order, except skip.
func sameHeaders(t *testing.T, head []byte, ref http.Header, skip string) {
	t.Helper()
	seen := map[string]int{}
	forEachLine(head[bytes.IndexByte(head, '\n')+1:], func(line []byte) bool {
		name, v, ok := splitHeader(line)
		if !ok {
			t.Fatalf("taken head holds an invalid field %q", line)
		}
		k := textproto.CanonicalMIMEHeaderKey(string(name))
		if k == skip || k == "Content-Length" || k == "Transfer-Encoding" {
			return true // compared as framing; net/http moves them
		}
		i := seen[k]
		seen[k]++
		if i >= len(ref[k]) || ref[k][i] != string(v) {
			t.Fatalf("field %s #%d = %q, net/http has %q", k, i, v, ref[k])
		}
		return true
	})
}

// sameFraming checks the fast path's framing against net/http's;
// noLength is what net/http reports without one (0 for requests, -1 for
// responses, read until close).
func sameFraming(t *testing.T, chunked bool, length int64, te []string, refLength, noLength int64) {
	t.Helper()
	switch {
	case chunked:
		if !slices.Equal(te, []string{"chunked"}) {
			t.Fatalf("chunked, net/http transfer-encoding %q length %d", te, refLength)
		}
	case length >= 0:
		if len(te) != 0 || refLength != length {
			t.Fatalf("length %d, net/http %d %q", length, refLength, te)
		}
	default:
		if len(te) != 0 || refLength != noLength {
			t.Fatalf("no length, net/http %d %q", refLength, te)
		}
	}
}
