package proxy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
)

// TestMesh runs real traffic between two network namespaces, each with the
// CNI plugin's redirect rules and a plexus-proxy process running as UID
// 2102: client → (nat OUTPUT) → client proxy :4140 → veth → (nat
// PREROUTING) → server proxy :4143 → server. Servers see the server
// proxy's inbound source (127.0.0.6, ::1) as the peer, which proves both
// hops carried the traffic.
func TestMesh(t *testing.T) {
	m := newMesh(t)
	target := func(port int) string { return fmt.Sprintf("%s:%d", serverIP, port) }
	// both asserts a metric's value on the client proxy (outbound) and the
	// server proxy (inbound).
	both := func(t *testing.T, name string, labels map[string]string, want float64) {
		t.Helper()
		for _, side := range []struct {
			p   *pod
			dir string
		}{{m.client, "outbound"}, {m.server, "inbound"}} {
			l := map[string]string{"direction": side.dir}
			for k, v := range labels {
				l[k] = v
			}
			if got := sumSamples(side.p.scrape(t), name, l); got != want {
				t.Errorf("%s proxy: %s%v = %v, want %v", side.dir, name, l, got, want)
			}
		}
	}

	t.Run("http1-keepalive", func(t *testing.T) {
		var mu sync.Mutex
		peers, conns := map[string]bool{}, 0
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			host, _, _ := net.SplitHostPort(r.RemoteAddr)
			mu.Lock()
			peers[host] = true
			mu.Unlock()
			body, _ := io.ReadAll(r.Body)
			fmt.Fprintf(w, "%s %s %s", r.Method, r.URL.RequestURI(), body)
		}), ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				mu.Lock()
				conns++
				mu.Unlock()
			}
		}}
		go srv.Serve(m.server.listen(t, ":8080"))
		defer srv.Close()
		c := m.client.httpClient(false)
		const n = 7
		for i := range n {
			res, err := c.Post(fmt.Sprintf("http://%s/echo?i=%d", target(8080), i), "text/plain", strings.NewReader(fmt.Sprint("body", i)))
			if err != nil {
				t.Fatal(err)
			}
			got, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if want := fmt.Sprintf("POST /echo?i=%d body%d", i, i); res.StatusCode != 200 || string(got) != want {
				t.Fatalf("got %d %q, want %q", res.StatusCode, got, want)
			}
		}
		mu.Lock()
		if len(peers) != 1 || !peers[inboundSource] || conns != 1 {
			t.Errorf("server saw peers %v over %d connections; want only the server proxy (%s) over 1 pooled connection", peers, conns, inboundSource)
		}
		mu.Unlock()
		both(t, "request_total", map[string]string{"target_addr": target(8080)}, n)
		both(t, "response_total", map[string]string{"target_addr": target(8080), "status_code": "200", "classification": "success"}, n)
		both(t, "response_latency_ms", map[string]string{"target_addr": target(8080)}, n)
		// One client connection (keep-alive) and one upstream connection (pool) per proxy.
		both(t, "tcp_open_total", map[string]string{"target_addr": target(8080), "peer": "src"}, 1)
		both(t, "tcp_open_total", map[string]string{"target_addr": target(8080), "peer": "dst"}, 1)
	})

	t.Run("ipv6-http1-and-opaque", func(t *testing.T) {
		rec := &peerRecorder{body: "v6 ok"}
		srv := &http.Server{Handler: rec}
		go srv.Serve(m.server.listen(t, "[::]:8086"))
		defer srv.Close()
		tgt := net.JoinHostPort(serverIP6, "8086")
		res, err := m.client.httpClient(false).Get("http://" + tgt + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(body) != "v6 ok" {
			t.Fatalf("got %d %q", res.StatusCode, body)
		}
		if peer := rec.last(); peer != inboundSource6 {
			t.Errorf("server saw peer %s, want the server proxy %s", peer, inboundSource6)
		}
		both(t, "request_total", map[string]string{"target_addr": "[" + serverIP6 + "]:8086"}, 1)
		both(t, "response_total", map[string]string{"target_addr": "[" + serverIP6 + "]:8086", "status_code": "200"}, 1)

		// Opaque over IPv6 (5432 is a default opaque port).
		ln := m.server.listen(t, "[::]:5432")
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			io.WriteString(c, "pg-hello")
			c.Close()
		}()
		c, err := m.client.dial(context.Background(), net.JoinHostPort(serverIP6, "5432"))
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		got, _ := io.ReadAll(c)
		c.Close()
		if string(got) != "pg-hello" {
			t.Fatalf("opaque v6 got %q", got)
		}
		both(t, "tcp_read_bytes_total", map[string]string{"target_addr": "[" + serverIP6 + "]:5432", "peer": "dst"}, 8)
	})

	t.Run("grpc-h2c", func(t *testing.T) {
		hs := health.NewServer()
		hs.SetServingStatus("web", healthpb.HealthCheckResponse_SERVING)
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, hs)
		testpb.RegisterTestServiceServer(gs, echoService{})
		go gs.Serve(m.server.listen(t, ":9090"))
		defer gs.Stop()
		cc, err := grpc.NewClient("passthrough:///"+target(9090),
			grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithContextDialer(m.client.dial))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		client := healthpb.NewHealthClient(cc)
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		defer cancel()
		exerciseHealth(ctx, t, client, hs, healthpb.HealthCheckResponse_NOT_SERVING, healthpb.HealthCheckResponse_SERVING)
		// Bidirectional streaming, ping-pong: needs full duplex on both hops.
		bidi, err := testpb.NewTestServiceClient(cc).FullDuplexCall(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 10 {
			body := []byte(fmt.Sprint("ping ", i))
			if err := bidi.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}}); err != nil {
				t.Fatal(err)
			}
			if res, err := bidi.Recv(); err != nil || string(res.GetPayload().GetBody()) != string(body) {
				t.Fatalf("bidi reply %d = %v, %v", i, res, err)
			}
		}
		bidi.CloseSend()
		if _, err := bidi.Recv(); err != io.EOF {
			t.Fatalf("bidi end = %v, want EOF", err)
		}
		cancel()
		waitFor(t, "bidi call counted on both proxies", func() bool {
			return sumSamples(m.client.scrape(t), "response_total", map[string]string{"target_addr": target(9090), "grpc_status": "0"}) == 3 &&
				sumSamples(m.server.scrape(t), "response_total", map[string]string{"target_addr": target(9090), "grpc_status": "0"}) == 3
		})
		both(t, "response_total", map[string]string{"target_addr": target(9090), "grpc_status": "0", "classification": "success"}, 3)
		both(t, "response_total", map[string]string{"target_addr": target(9090), "grpc_status": "5", "classification": "failure"}, 1)
		both(t, "request_total", map[string]string{"target_addr": target(9090)}, 5)
	})

	t.Run("websocket", func(t *testing.T) {
		srv := &http.Server{Handler: websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) })}
		go srv.Serve(m.server.listen(t, ":8081"))
		defer srv.Close()
		cfg, _ := websocket.NewConfig(fmt.Sprintf("ws://%s/ws", target(8081)), "http://client/")
		raw, err := m.client.dial(context.Background(), target(8081))
		if err != nil {
			t.Fatal(err)
		}
		ws, err := websocket.NewClient(cfg, raw)
		if err != nil {
			t.Fatal(err)
		}
		for _, msg := range []string{"hello", "world", strings.Repeat("z", 3000)} {
			websocket.Message.Send(ws, msg)
			var got string
			ws.SetDeadline(time.Now().Add(5 * time.Second))
			if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
				t.Fatalf("echo: %d bytes, %v", len(got), err)
			}
		}
		ws.Close()
		waitFor(t, "101 responses counted", func() bool {
			return sumSamples(m.client.scrape(t), "response_total", map[string]string{"target_addr": target(8081), "status_code": "101"}) == 1 &&
				sumSamples(m.server.scrape(t), "response_total", map[string]string{"target_addr": target(8081), "status_code": "101"}) == 1
		})
	})

	t.Run("opaque-server-speaks-first", func(t *testing.T) {
		const greeting, reply = "+OK redis-like ready\r\n", "+PONG\r\n"
		serve := func(ln net.Listener) {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				go func() {
					defer c.Close()
					io.WriteString(c, greeting)
					line, _ := bufio.NewReader(c).ReadString('\n')
					if line == "PING\r\n" {
						io.WriteString(c, reply)
					}
				}()
			}
		}
		go serve(m.server.listen(t, ":6379")) // a default opaque port
		go serve(m.server.listen(t, ":7000")) // not opaque: detection times out (500ms per proxy)
		for _, tc := range []struct {
			port     int
			min, max time.Duration
		}{{6379, 0, 400 * time.Millisecond}, {7000, time.Second, 5 * time.Second}} {
			t0 := time.Now()
			c, err := m.client.dial(context.Background(), target(tc.port))
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(10 * time.Second))
			br := bufio.NewReader(c)
			line, err := br.ReadString('\n')
			el := time.Since(t0)
			if err != nil || line != greeting {
				t.Fatalf("port %d: greeting %q, %v", tc.port, line, err)
			}
			if el < tc.min || el > tc.max {
				t.Errorf("port %d: greeting after %s, want within [%s, %s]", tc.port, el, tc.min, tc.max)
			}
			io.WriteString(c, "PING\r\n")
			if line, _ := br.ReadString('\n'); line != reply {
				t.Fatalf("port %d: reply %q", tc.port, line)
			}
			c.Close()
			tgt := target(tc.port)
			waitFor(t, "connections closed", func() bool {
				return sumSamples(m.client.scrape(t), "tcp_close_total", map[string]string{"target_addr": tgt}) == 2 &&
					sumSamples(m.server.scrape(t), "tcp_close_total", map[string]string{"target_addr": tgt}) == 2
			})
			both(t, "tcp_read_bytes_total", map[string]string{"target_addr": tgt, "peer": "dst"}, float64(len(greeting+reply)))
			both(t, "tcp_write_bytes_total", map[string]string{"target_addr": tgt, "peer": "dst"}, float64(len("PING\r\n")))
			both(t, "tcp_open_connections", map[string]string{"target_addr": tgt}, 0)
			both(t, "request_total", map[string]string{"target_addr": tgt}, 0)
		}
	})

	t.Run("upstream-failures", func(t *testing.T) {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Transfer-Encoding", "chunked")
			io.WriteString(w, "partial")
			w.(http.Flusher).Flush()
			c, _, _ := http.NewResponseController(w).Hijack()
			c.(*net.TCPConn).SetLinger(0)
			c.Close() // the server dies mid-response
		})}
		go srv.Serve(m.server.listen(t, ":8082"))
		defer srv.Close()
		c := m.client.httpClient(false)
		// Nothing listens on 8099: the server-side proxy answers 502.
		res, err := c.Get(fmt.Sprintf("http://%s/", target(8099)))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 502 || res.Header.Get(httpproxy.ErrorHeader) != httpproxy.ReasonConnectRefused {
			t.Errorf("refused: %d %s=%q", res.StatusCode, httpproxy.ErrorHeader, res.Header.Get(httpproxy.ErrorHeader))
		}
		// Killed mid-response: a prompt error, never a hang or a clean end.
		t0 := time.Now()
		res, err = c.Get(fmt.Sprintf("http://%s/", target(8082)))
		if err == nil {
			_, err = io.ReadAll(res.Body)
			res.Body.Close()
		}
		if err == nil {
			t.Error("truncated response read without error")
		}
		if el := time.Since(t0); el > 5*time.Second {
			t.Errorf("failure took %s", el)
		}
		if got := sumSamples(m.server.scrape(t), "response_total", map[string]string{"direction": "inbound", "target_addr": target(8099), "status_code": "502", "error": "connect-refused"}); got != 1 {
			t.Errorf("server proxy response_total{502,connect-refused} = %v", got)
		}
		if got := sumSamples(m.client.scrape(t), "response_total", map[string]string{"direction": "outbound", "target_addr": target(8099), "status_code": "502", "classification": "failure"}); got != 1 {
			t.Errorf("client proxy response_total{502} = %v", got)
		}
		if got := sumSamples(m.server.scrape(t), "response_total", map[string]string{"direction": "inbound", "target_addr": target(8082), "error": "upstream-reset"}); got != 1 {
			t.Errorf("server proxy response_total{upstream-reset} = %v", got)
		}
	})

	// Last: it stops the client pod's proxy.
	t.Run("sigterm-drains", func(t *testing.T) {
		started := make(chan struct{})
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			close(started)
			// Sleep: the slow in-flight request under test; it must outlast
			// the SIGTERM and the start of the drain, and nothing reports
			// when a drain that wrongly cuts it would have done so.
			time.Sleep(time.Second)
			io.WriteString(w, "finished after SIGTERM")
		})}
		go srv.Serve(m.server.listen(t, ":8083"))
		defer srv.Close()
		type result struct {
			body string
			err  error
		}
		done := make(chan result, 1)
		go func() {
			res, err := m.client.httpClient(false).Get(fmt.Sprintf("http://%s/slow", target(8083)))
			if err != nil {
				done <- result{err: err}
				return
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			done <- result{string(b), err}
		}()
		<-started
		if err := m.client.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		r := <-done
		if r.err != nil || r.body != "finished after SIGTERM" {
			t.Fatalf("in-flight request: %q, %v", r.body, r.err)
		}
		select {
		case err := <-m.client.exit:
			m.client.exit <- err // for the cleanup
			if err != nil {
				t.Fatalf("proxy exited with %v after SIGTERM", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("proxy did not exit after draining")
		}
		// With the proxy gone, the pod's redirected connections fail fast.
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if c, err := m.client.dial(ctx, target(8083)); err == nil {
			c.Close()
			t.Error("connection succeeded with the client proxy stopped")
		}
	})
}
