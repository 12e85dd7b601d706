package proxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// FuzzHTTP1Head sends arbitrary bytes after a valid request line, so they
// are parsed as an HTTP/1 head (or, if detection rejects them, forwarded
// opaque). Whatever the input, the proxy must end the exchange within a
// bounded time and keep serving a well-formed request afterwards.
func FuzzHTTP1Head(f *testing.F) {
	for _, s := range []string{
		"Host: a\r\n\r\n",
		"Host: a\r\nContent-Length: 5\r\n\r\nhello",
		"Host: a\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\nX-T: 1\r\n\r\n",
		"Host: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"Host: a\r\nConnection: X-A, close\r\nX-A: 1\r\n\r\n",
		"Host: a\r\nContent-Length: 99\r\nContent-Length: 1\r\n\r\n",
		"Host: a\r\nTE: trailers\r\nExpect: 100-continue\r\n\r\n",
		"Host: \x00\r\n\r\n",
		"\r\n\r\n",
		"Host: a\r\n Folded: x\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "ok")
	}))
	defer up.Close()
	h := startTB(f, nil)
	h.to(up.Listener.Addr().String())
	good := h.client(false)
	n := 0
	f.Fuzz(func(t *testing.T, head []byte) {
		if len(head) > 16<<10 {
			return
		}
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		c.Write(append([]byte("POST /f HTTP/1.1\r\n"), head...))
		c.(*net.TCPConn).CloseWrite()
		// Read until the proxy (or upstream) ends the exchange.
		if _, err := io.Copy(io.Discard, bufio.NewReader(c)); err != nil {
			t.Fatalf("exchange did not end: %v", err)
		}
		if n++; n%50 == 1 {
			res, err := good.Get("http://svc.example/")
			if err != nil {
				t.Fatalf("proxy stopped serving: %v", err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("well-formed request got %d", res.StatusCode)
			}
		}
	})
}
