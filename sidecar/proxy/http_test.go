package proxy

import (
	"bufio"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
)

func TestHTTP1KeepAliveHopByHopAndPooling(t *testing.T) {
	var upstreamConns atomic.Int32
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Secret") != "" || r.Header.Get("Keep-Alive") != "" || r.Header.Get("Proxy-Connection") != "" {
			t.Errorf("hop-by-hop header reached upstream: %v", r.Header)
		}
		if r.Header.Get("X-End-To-End") != "yes" {
			t.Errorf("end-to-end header lost: %v", r.Header)
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("Connection", "X-Resp-Hop")
		w.Header().Set("X-Resp-Hop", "1")
		fmt.Fprintf(w, "%s %s host=%s body=%s", r.Method, r.URL.RequestURI(), r.Host, body)
	}))
	up.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			upstreamConns.Add(1)
		}
	}
	up.Start()
	defer up.Close()
	h := start(t, nil)
	h.to(up.Listener.Addr().String())
	c := h.client(false)
	const n = 5
	for i := range n {
		req, _ := http.NewRequest("POST", fmt.Sprintf("http://web.example:8080/p?i=%d", i), strings.NewReader("hello"))
		req.Header.Set("Connection", "X-Secret")
		req.Header.Set("X-Secret", "1")
		req.Header.Set("Keep-Alive", "timeout=5")
		req.Header.Set("Proxy-Connection", "keep-alive")
		req.Header.Set("X-End-To-End", "yes")
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := readAll(t, res.Body)
		res.Body.Close()
		want := fmt.Sprintf("POST /p?i=%d host=web.example:8080 body=hello", i)
		if res.StatusCode != 200 || body != want {
			t.Fatalf("got %d %q, want 200 %q", res.StatusCode, body, want)
		}
		if res.Header.Get("X-Resp-Hop") != "" {
			t.Errorf("response hop-by-hop header reached client")
		}
	}
	target := up.Listener.Addr().String()
	lbl := map[string]string{"direction": "outbound", "target_addr": target}
	if got := h.metric(t, "tcp_open_total", map[string]string{"target_addr": target, "peer": "src"}); got != 1 {
		t.Errorf("client connections = %v, want 1 (keep-alive)", got)
	}
	if got := upstreamConns.Load(); got != 1 {
		t.Errorf("upstream connections = %d, want 1 (pooled)", got)
	}
	if got := h.metric(t, "request_total", map[string]string{"direction": "outbound", "target_addr": target, "authority": "web.example:8080"}); got != n {
		t.Errorf("request_total = %v, want %d", got, n)
	}
	lbl["status_code"], lbl["classification"] = "200", "success"
	if got := h.metric(t, "response_total", lbl); got != n {
		t.Errorf("response_total{200,success} = %v, want %d", got, n)
	}
	if got := h.metric(t, "response_latency_ms", map[string]string{"status_code": "200"}); got != n {
		t.Errorf("latency samples = %v, want %d", got, n)
	}
}

func TestH2CStreamingAndTrailers(t *testing.T) {
	release := make(chan struct{})
	srv := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			t.Errorf("upstream got HTTP/%d, want 2", r.ProtoMajor)
		}
		w.Header().Set("Trailer", "X-Checksum")
		io.WriteString(w, "first;")
		w.(http.Flusher).Flush()
		<-release // the client must see "first;" before we go on
		io.WriteString(w, "second")
		w.Header().Set("X-Checksum", "abc")
		w.Header().Set(http.TrailerPrefix+"X-Late", "late")
	})}
	srv.Protocols.SetUnencryptedHTTP2(true)
	addr := serveLoopback(t, srv)
	h := start(t, nil)
	h.to(addr)
	res, err := h.client(true).Get("http://svc.example/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.ProtoMajor != 2 {
		t.Fatalf("client got HTTP/%d", res.ProtoMajor)
	}
	first := make([]byte, len("first;"))
	got := make(chan error, 1)
	go func() { _, err := io.ReadFull(res.Body, first); got <- err }()
	select {
	case err := <-got:
		if err != nil || string(first) != "first;" {
			t.Fatalf("first chunk %q, %v", first, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("first chunk not flushed through the proxy")
	}
	close(release)
	if rest := readAll(t, res.Body); rest != "second" {
		t.Fatalf("rest = %q", rest)
	}
	if res.Trailer.Get("X-Checksum") != "abc" || res.Trailer.Get("X-Late") != "late" {
		t.Errorf("trailers = %v", res.Trailer)
	}
}

func TestUpstreamRefusedIs502(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	h := start(t, nil)
	h.to(closed)
	for _, h2 := range []bool{false, true} {
		res, err := h.client(h2).Get("http://svc.example/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 502 || res.Header.Get(httpproxy.ErrorHeader) != httpproxy.ReasonConnectRefused {
			t.Errorf("h2=%v: got %d %q=%q", h2, res.StatusCode, httpproxy.ErrorHeader, res.Header.Get(httpproxy.ErrorHeader))
		}
	}
	if got := h.metric(t, "response_total", map[string]string{"status_code": "502", "classification": "failure", "error": "connect-refused"}); got != 2 {
		t.Errorf("response_total{502,connect-refused} = %v", got)
	}
}

// TestServerDiesMidResponse checks a client gets an error promptly, not a
// hang or a truncated body that looks complete.
func TestServerDiesMidResponse(t *testing.T) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100")
		io.WriteString(w, "partial")
		w.(http.Flusher).Flush()
		if r.ProtoMajor == 2 {
			panic(http.ErrAbortHandler) // RST_STREAM
		}
		c, _, _ := http.NewResponseController(w).Hijack()
		c.(*net.TCPConn).SetLinger(0)
		c.Close()
	})
	srv := &http.Server{Handler: handler, Protocols: new(http.Protocols), ErrorLog: log.New(io.Discard, "", 0)}
	srv.Protocols.SetHTTP1(true)
	srv.Protocols.SetUnencryptedHTTP2(true)
	addr := serveLoopback(t, srv)
	h := start(t, nil)
	h.to(addr)
	for _, h2 := range []bool{false, true} {
		t0 := time.Now()
		res, err := h.client(h2).Get("http://svc.example/")
		if err != nil {
			// HTTP/1 with a known length: the proxy had not flushed the
			// headers yet, so the client sees the connection drop. Also a
			// clear failure, as long as it is prompt.
			if time.Since(t0) > 5*time.Second {
				t.Errorf("h2=%v: failure took %s", h2, time.Since(t0))
			}
			continue
		}
		if res.StatusCode != 200 {
			t.Fatalf("h2=%v: status %d", h2, res.StatusCode)
		}
		done := make(chan error, 1)
		go func() { _, err := io.ReadAll(res.Body); done <- err }()
		select {
		case err := <-done:
			if err == nil {
				t.Errorf("h2=%v: truncated body read without error", h2)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("h2=%v: client hangs after the server died", h2)
		}
		res.Body.Close()
	}
	if got := h.metric(t, "response_total", map[string]string{"error": "upstream-reset", "classification": "failure"}); got != 2 {
		t.Errorf("response_total{upstream-reset} = %v, want 2", got)
	}
}

func TestOversizedHeadersAndSlowloris(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	h := start(t, func(_ *config.Config, o *Options) { o.ReadHeaderTimeout = 300 * time.Millisecond })
	h.to(up.Listener.Addr().String())

	// Oversized: 100 KiB of headers get 431 and the connection is closed.
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 100<<10))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("oversized headers: %v %v", res, err)
	}

	// Slowloris: headers trickle in; the proxy hangs up after the header timeout.
	s, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	io.WriteString(s, "GET / HTTP/1.1\r\nHost: x\r\n")
	start := time.Now()
	go func() {
		for range 50 {
			if _, err := io.WriteString(s, "X-A: b\r\n"); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // Sleep: the client trickles on purpose (slowloris)
		}
	}()
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.ReadAll(s) // returns when the proxy closes the connection
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("slow client held the connection for %s", el)
	}

	// Others are still served.
	res, err = h.client(false).Get("http://svc.example/")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("after bad clients: %v %v", res, err)
	}
	res.Body.Close()
}
