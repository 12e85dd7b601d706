package httpproxy

import (
	"bytes"
	"io"
	"net/http/httputil"
	"strings"
	"testing"
	"time"
)

// FuzzFastPathHeads feeds arbitrary bytes to the fast path's head
// parsers and chunked relay: no panic, no unbounded growth, and what is
// forwarded stays within what came in plus the proxy's own framing.
func FuzzFastPathHeads(f *testing.F) {
	for _, s := range []string{
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"POST /p HTTP/1.1\r\nHost: x\r\nConnection: close, X-A\r\nX-A: 1\r\nTe: trailers\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: x\r\n\r\nabc",
		"HTTP/1.0 204\nGrpc-Status: 0\n\n",
		"5;x=y\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
		"5 ; a = \"x\\\"y\"\r\nhello\r\n0\r\n\r\n",
		"5;a=\"xy\r\nhello\r\n0\r\n\r\n",
		"5;=x\r\nhello\r\n0\r\n\r\n",
		"ffffffffffffffff\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if n := headEnd(in); n > 0 {
			req := parseRequest(in[:n])
			if req.plain {
				out := req.appendUpstream(nil)
				if len(out) > n+len("Te: trailers\r\nTransfer-Encoding: chunked\r\n") {
					t.Fatalf("upstream head of %d bytes from a head of %d", len(out), n)
				}
				if req.contentLength >= 0 && req.chunked {
					t.Fatal("plain request with both framings")
				}
			}
			if res, err := parseResponse(in[:n]); err == nil {
				if res.status < 100 || res.status > 999 {
					t.Fatalf("status %d", res.status)
				}
				res.appendClient(nil, true)
			}
		}
		var out bytes.Buffer
		cp := copier{r: newReader(memConn{Reader: bytes.NewReader(in)}, h1ReadBuf), w: &h1writer{c: memConn{Writer: &out}}, buf: make([]byte, 512)}
		if err := cp.copyChunked(); err == nil {
			if err := cp.w.flush(); err != nil {
				t.Fatal(err)
			}
			// What the relay accepted, net/http's chunked reader accepts
			// with the same data, and the relay's output decodes to it too.
			want, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(in)))
			if err != nil {
				t.Fatalf("relay accepted a chunked body net/http refuses (%v): %q", err, in)
			}
			got, err := io.ReadAll(httputil.NewChunkedReader(bytes.NewReader(out.Bytes())))
			if err != nil || !bytes.Equal(got, want) || !strings.HasSuffix(out.String(), "\r\n\r\n") {
				t.Fatalf("chunked relay wrote %q (%v) from %q", out.Bytes(), err, in)
			}
		}
	})
}

// memConn is an in-memory reader or writer with the deadline methods
// the fast path calls.
type memConn struct {
	io.Reader
	io.Writer
}

func (memConn) SetReadDeadline(time.Time) error  { return nil }
func (memConn) SetWriteDeadline(time.Time) error { return nil }
