package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/discovery"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// banner runs a server-speaks-first TCP server (SMTP-like): it greets,
// then echoes lines until the client half-closes, then says bye.
func banner(t *testing.T) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.WriteString(c, "220 hello\r\n")
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					io.WriteString(c, "echo "+sc.Text()+"\n")
				}
				io.WriteString(c, "221 bye\r\n")
			}()
		}
	}()
	return ln
}

func TestOpaqueServerSpeaksFirst(t *testing.T) {
	ln := banner(t)
	port := ln.Addr().(*net.TCPAddr).Port
	for _, tc := range []struct {
		name     string
		opaque   bool
		min, max time.Duration
	}{
		{"configured opaque port: no detection wait", true, 0, 200 * time.Millisecond},
		{"other port: opaque after the detection timeout", false, 300 * time.Millisecond, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := start(t, func(c *config.Config, _ *Options) {
				c.OpaquePorts = config.PortSet{}
				if tc.opaque {
					c.OpaquePorts.Add(uint16(port))
				}
			})
			h.to(ln.Addr().String())
			t0 := time.Now()
			c, err := net.Dial("tcp", h.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			br := bufio.NewReader(c)
			line, err := br.ReadString('\n')
			if err != nil || line != "220 hello\r\n" {
				t.Fatalf("greeting %q, %v", line, err)
			}
			if el := time.Since(t0); el < tc.min || el > tc.max {
				t.Errorf("greeting after %s, want in [%s, %s]", el, tc.min, tc.max)
			}
			io.WriteString(c, "HELO x\n")
			c.(*net.TCPConn).CloseWrite()
			rest, _ := io.ReadAll(br)
			if string(rest) != "echo HELO x\n221 bye\r\n" {
				t.Fatalf("rest %q", rest)
			}
			target := ln.Addr().String()
			waitFor(t, "tcp_close_total", func() bool {
				return h.metric(t, "tcp_close_total", map[string]string{"target_addr": target}) == 2
			})
			if got := h.metric(t, "tcp_read_bytes_total", map[string]string{"target_addr": target, "peer": "dst"}); got != float64(len("220 hello\r\necho HELO x\n221 bye\r\n")) {
				t.Errorf("bytes read from dst = %v", got)
			}
			if got := h.metric(t, "tcp_read_bytes_total", map[string]string{"target_addr": target, "peer": "src"}); got != float64(len("HELO x\n")) {
				t.Errorf("bytes read from src = %v", got)
			}
			if got := h.metric(t, "tcp_open_connections", map[string]string{"target_addr": target}); got != 0 {
				t.Errorf("open connections = %v", got)
			}
		})
	}
}

func TestGarbageIsForwardedOpaque(t *testing.T) {
	got := make(chan string, 1)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		b, _ := io.ReadAll(c)
		c.Close()
		got <- string(b)
	}()
	h := start(t, nil)
	h.to(ln.Addr().String())
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	garbage := "\x16\x03\x01\x00\xff" + strings.Repeat("\x00garbage", 2000)
	io.WriteString(c, garbage)
	c.(*net.TCPConn).CloseWrite()
	select {
	case g := <-got:
		if g != garbage {
			t.Fatalf("upstream got %d bytes, want %d", len(g), len(garbage))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("garbage not forwarded")
	}
	c.Close()
}

func TestHalfOpenClientsDoNotBlockOthers(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer up.Close()
	h := start(t, nil)
	h.to(up.Listener.Addr().String())
	// 50 clients connect and send nothing (stuck in detection) ...
	var idle []net.Conn
	for range 50 {
		c, err := net.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		idle = append(idle, c)
	}
	defer func() {
		for _, c := range idle {
			c.Close()
		}
	}()
	// ... and a normal request is still answered at once.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://svc.example/", nil)
	res, err := h.client(false).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if body := readAll(t, res.Body); body != "ok" {
		t.Fatalf("body %q", body)
	}
	res.Body.Close()
}

func TestShutdownDrainsInFlight(t *testing.T) {
	started := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		// Sleep: slow on purpose, in flight while Shutdown drains; no hook tells when the drain waits.
		time.Sleep(400 * time.Millisecond)
		io.WriteString(w, "slow but complete")
	}))
	defer up.Close()
	h := start(t, nil)
	h.to(up.Listener.Addr().String())
	type result struct {
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		res, err := h.client(false).Get("http://svc.example/")
		if err != nil {
			done <- result{"", err}
			return
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		done <- result{string(b), err}
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	r := <-done
	if r.err != nil || r.body != "slow but complete" {
		t.Fatalf("in-flight request: %q, %v", r.body, r.err)
	}
	if _, err := net.DialTimeout("tcp", h.addr, time.Second); err == nil {
		t.Error("listener still accepting after Shutdown")
	}
}

func TestShutdownCutsAfterGrace(t *testing.T) {
	ln := banner(t)
	h := start(t, func(c *config.Config, _ *Options) {
		c.OpaquePorts = config.PortSet{}
		c.OpaquePorts.Add(uint16(ln.Addr().(*net.TCPAddr).Port))
	})
	h.to(ln.Addr().String())
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	bufio.NewReader(c).ReadString('\n')
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	if err := h.p.Shutdown(ctx); err == nil {
		t.Error("Shutdown reported a clean drain with an open opaque connection")
	}
	if el := time.Since(t0); el > 2*time.Second {
		t.Errorf("Shutdown took %s with a 200ms grace", el)
	}
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.ReadAll(c); err != nil {
		t.Errorf("client connection not closed by Shutdown: %v", err)
	}
}

func TestShutdownDrainsInFlightH2(t *testing.T) {
	started := make(chan struct{})
	srv := &http.Server{Protocols: new(http.Protocols), Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(started)
		// Sleep: slow on purpose, in flight while Shutdown drains; no hook tells when the drain waits.
		time.Sleep(400 * time.Millisecond)
		io.WriteString(w, "h2 complete")
	})}
	srv.Protocols.SetUnencryptedHTTP2(true)
	addr := serveLoopback(t, srv)
	h := start(t, nil)
	h.to(addr)
	done := make(chan string, 1)
	go func() {
		res, err := h.client(true).Get("http://svc.example/")
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			done <- "error: " + err.Error()
			return
		}
		done <- string(b)
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.p.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if got := <-done; got != "h2 complete" {
		t.Fatalf("in-flight h2 request: %q", got)
	}
}

func TestOpaqueResetCountsFailure(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		// Wait for the client's byte so the proxy's dial has completed
		// (an RST during connect is a dial failure, a different path).
		io.ReadFull(c, make([]byte, 1))
		io.WriteString(c, "hi")
		c.(*net.TCPConn).SetLinger(0)
		c.Close() // RST
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	h := start(t, func(c *config.Config, _ *Options) { c.OpaquePorts = config.PortSet{}; c.OpaquePorts.Add(port) })
	h.to(ln.Addr().String())
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte("x"))
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	io.ReadAll(c)
	target := ln.Addr().String()
	if !eventually.Holds(5*time.Second, func() bool {
		return h.metric(t, "tcp_close_total", map[string]string{"target_addr": target, "classification": "failure"}) == 2
	}) {
		for _, peer := range []string{"src", "dst"} {
			t.Logf("%s: open_total=%v open=%v", peer,
				h.metric(t, "tcp_open_total", map[string]string{"target_addr": target, "peer": peer}),
				h.metric(t, "tcp_open_connections", map[string]string{"target_addr": target, "peer": peer}))
		}
		t.Fatalf("failure closes = %v, success closes = %v",
			h.metric(t, "tcp_close_total", map[string]string{"target_addr": target, "classification": "failure"}),
			h.metric(t, "tcp_close_total", map[string]string{"target_addr": target, "classification": "success"}))
	}
	if got := h.metric(t, "tcp_close_total", map[string]string{"target_addr": target, "classification": "success"}); got != 0 {
		t.Errorf("success closes = %v", got)
	}
}

// seqResolver picks its endpoints in turn for opaque connections, and
// counts the picks.
type seqResolver struct {
	staticResolver
	eps   []discovery.Endpoint
	picks atomic.Int64
}

func (r *seqResolver) PickConn(context.Context, netip.AddrPort) (discovery.Pick, error) {
	n := r.picks.Add(1) - 1
	return discovery.Pick{Endpoint: r.eps[int(n)%len(r.eps)]}, nil
}

// An outbound opaque connection whose endpoint refuses it is opened to
// another endpoint instead: the client sees the greeting of the second,
// not a connection closed under it (a node that died with the first).
func TestOpaqueRetriesAnotherEndpoint(t *testing.T) {
	ln := banner(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := netip.MustParseAddrPort(dead.Addr().String())
	dead.Close() // connections to it are refused
	r := &seqResolver{eps: []discovery.Endpoint{{Addr: deadAddr}, {Addr: netip.MustParseAddrPort(ln.Addr().String())}}}
	h := start(t, func(c *config.Config, o *Options) {
		c.OpaquePorts = config.PortSet{}
		c.OpaquePorts.Add(deadAddr.Port())
		o.Resolver = r
	})
	h.to(deadAddr.String())
	c, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || line != "220 hello\r\n" {
		t.Fatalf("greeting %q, %v; want the second endpoint's", line, err)
	}
	if n := r.picks.Load(); n != 2 {
		t.Errorf("%d picks, want 2 (the refused endpoint, then the other)", n)
	}
}
