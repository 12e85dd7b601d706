package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/net/websocket"

	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// TestNoLeaksAfterShutdown drives every path (HTTP/1, h2c, WebSocket,
// opaque, garbage, silent clients, refused upstream) through a proxy,
// shuts it down, and checks goroutines and file descriptors return to
// where they were.
func TestNoLeaksAfterShutdown(t *testing.T) {
	up := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/ws" {
			websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }).ServeHTTP(w, r)
			return
		}
		io.WriteString(w, "ok")
	}))
	up.Config.Protocols = new(http.Protocols)
	up.Config.Protocols.SetHTTP1(true)
	up.Config.Protocols.SetUnencryptedHTTP2(true)
	up.Start()
	defer up.Close()
	bn := banner(t)
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(ents)
	}
	runtime.GC()
	baseG, baseFD := runtime.NumGoroutine(), fds()

	h := start(t, func(c *config.Config, _ *Options) { c.DetectTimeout = 100 * time.Millisecond })
	h.to(up.Listener.Addr().String())
	for _, h2 := range []bool{false, true} {
		c := h.client(h2)
		for range 5 {
			res, err := c.Get("http://svc.example/")
			if err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
		c.CloseIdleConnections()
	}
	cfg, _ := websocket.NewConfig("ws://svc.example/ws", "http://svc.example/")
	raw, _ := net.Dial("tcp", h.addr)
	if ws, err := websocket.NewClient(cfg, raw); err == nil {
		websocket.Message.Send(ws, "x")
		var s string
		websocket.Message.Receive(ws, &s)
		ws.Close()
	} else {
		t.Fatal(err)
	}
	// Garbage and a silent client.
	g, _ := net.Dial("tcp", h.addr)
	g.Write([]byte("\x16\x03\x01garbage"))
	g.Close()
	s, _ := net.Dial("tcp", h.addr)
	// Sleep: the client stays silent past the 100ms detect timeout, on purpose.
	time.Sleep(200 * time.Millisecond)
	s.Close()
	// Opaque server-speaks-first.
	h.to(bn.Addr().String())
	o, _ := net.Dial("tcp", h.addr)
	bufio.NewReader(o).ReadString('\n')
	o.Close()
	// Refused upstream.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	h.to(ln.Addr().String())
	ln.Close()
	if res, err := h.client(false).Get("http://svc.example/"); err == nil {
		res.Body.Close()
	}

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
	var gs, fd int
	if !eventually.Holds(5*time.Second, func() bool {
		gs, fd = runtime.NumGoroutine(), fds()
		// The banner server's accept loop stays (it belongs to the test).
		return gs <= baseG && fd <= baseFD
	}) {
		buf := make([]byte, 1<<20)
		t.Fatalf("goroutines %d→%d, fds %d→%d\n%s", baseG, gs, baseFD, fd, buf[:runtime.Stack(buf, true)])
	}
}
