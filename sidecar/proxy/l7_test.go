package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/websocket"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/plexus-mesh/plexus/sidecar/config"
)

// grpcThrough dials a gRPC client whose connections all go to the proxy.
func grpcThrough(t *testing.T, h *harness) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///svc.example:50051",
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", h.addr)
		}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func TestGRPCUnaryStreamingAndStatus(t *testing.T) {
	hs := health.NewServer()
	hs.SetServingStatus("web", healthpb.HealthCheckResponse_SERVING)
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go gs.Serve(ln)
	defer gs.Stop()
	h := start(t, nil)
	h.to(ln.Addr().String())
	client := healthpb.NewHealthClient(grpcThrough(t, h))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	exerciseHealth(ctx, t, client, hs, healthpb.HealthCheckResponse_NOT_SERVING)
	cancel()

	if got := h.metric(t, "response_total", map[string]string{"grpc_status": "0", "classification": "success"}); got != 2 {
		t.Errorf("response_total{grpc_status=0} = %v, want 2", got)
	}
	if got := h.metric(t, "response_total", map[string]string{"grpc_status": "5", "classification": "failure"}); got != 1 {
		t.Errorf("response_total{grpc_status=5} = %v, want 1", got)
	}
}

// exerciseHealth runs the gRPC exchange the proxy tests share against a
// health server whose "web" service is SERVING: two unary calls, an error
// status carried in trailers (NotFound), and a server stream that delivers
// SERVING and then each of then, set on hs one by one as they happen.
func exerciseHealth(ctx context.Context, t *testing.T, client healthpb.HealthClient, hs *health.Server, then ...healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for range 2 {
		res, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "web"})
		if err != nil || res.Status != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("Check = %v, %v", res, err)
		}
	}
	if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("Check(nope) = %v, want NotFound", err)
	}
	w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	want := append([]healthpb.HealthCheckResponse_ServingStatus{healthpb.HealthCheckResponse_SERVING}, then...)
	for i, st := range want {
		if i > 0 {
			hs.SetServingStatus("web", st)
		}
		if msg, err := w.Recv(); err != nil || msg.Status != st {
			t.Fatalf("Watch message %d = %v, %v; want %v", i, msg, err, st)
		}
	}
}

func TestGRPCUpstreamDownIsUnavailable(t *testing.T) {
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closed := ln.Addr().String()
	ln.Close()
	h := start(t, nil)
	h.to(closed)
	client := healthpb.NewHealthClient(grpcThrough(t, h))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := client.Check(ctx, &healthpb.HealthCheckRequest{})
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v, want Unavailable", err)
	}
	if got := h.metric(t, "response_total", map[string]string{"grpc_status": "14", "error": "connect-refused"}); got != 1 {
		t.Errorf("response_total{grpc_status=14,connect-refused} = %v", got)
	}
}

func TestWebSocket(t *testing.T) {
	up := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	defer up.Close()
	h := start(t, nil)
	h.to(up.Listener.Addr().String())
	cfg, err := websocket.NewConfig("ws://svc.example/echo", "http://svc.example/")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Dialer = &net.Dialer{}
	raw, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.NewClient(cfg, raw)
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"one", "two", strings.Repeat("x", 3000)} {
		if err := websocket.Message.Send(ws, msg); err != nil {
			t.Fatal(err)
		}
		var got string
		ws.SetDeadline(time.Now().Add(5 * time.Second))
		if err := websocket.Message.Receive(ws, &got); err != nil || got != msg {
			t.Fatalf("echo of %d bytes: got %d bytes, %v", len(msg), len(got), err)
		}
	}
	ws.Close()
	waitFor(t, "response_total{101}", func() bool {
		return h.metric(t, "response_total", map[string]string{"status_code": "101", "classification": "success"}) == 1
	})
}

var _ = http.StatusOK

// TestGRPCServerDiesMidStream checks a streaming call whose server goes
// away ends promptly with UNAVAILABLE, not a hang or INTERNAL.
func TestGRPCServerDiesMidStream(t *testing.T) {
	hs := health.NewServer()
	hs.SetServingStatus("web", healthpb.HealthCheckResponse_SERVING)
	gs := grpc.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go gs.Serve(ln)
	h := start(t, nil)
	h.to(ln.Addr().String())
	client := healthpb.NewHealthClient(grpcThrough(t, h))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := client.Watch(ctx, &healthpb.HealthCheckRequest{Service: "web"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil {
		t.Fatal(err)
	}
	gs.Stop() // closes the server's connections mid-stream
	t0 := time.Now()
	_, err = w.Recv()
	if status.Code(err) != codes.Unavailable {
		t.Errorf("Recv after server death = %v, want Unavailable", err)
	}
	if el := time.Since(t0); el > 5*time.Second {
		t.Errorf("took %s", el)
	}
	waitFor(t, "response_total{grpc_status=14,upstream-reset}", func() bool {
		return h.metric(t, "response_total", map[string]string{"grpc_status": "14", "error": "upstream-reset"}) == 1
	})
}

func TestWebSocketIdleTunnelIsClosed(t *testing.T) {
	up := httptest.NewServer(websocket.Handler(func(ws *websocket.Conn) { io.Copy(ws, ws) }))
	defer up.Close()
	h := start(t, func(c *config.Config, _ *Options) { c.IdleTimeout = 300 * time.Millisecond })
	h.to(up.Listener.Addr().String())
	cfg, _ := websocket.NewConfig("ws://svc.example/echo", "http://svc.example/")
	raw, err := net.Dial("tcp", h.addr)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := websocket.NewClient(cfg, raw)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	// Traffic every 100ms keeps the tunnel open past the idle timeout ...
	for i := range 6 {
		websocket.Message.Send(ws, "ping")
		var got string
		ws.SetDeadline(time.Now().Add(2 * time.Second))
		if err := websocket.Message.Receive(ws, &got); err != nil || got != "ping" {
			t.Fatalf("message %d: %q, %v", i, got, err)
		}
		time.Sleep(100 * time.Millisecond) // Sleep: the traffic's pace, past the idle timeout in all, on purpose
	}
	// ... silence closes it.
	t0 := time.Now()
	ws.SetDeadline(time.Now().Add(3 * time.Second))
	var got string
	err = websocket.Message.Receive(ws, &got)
	if err == nil {
		t.Fatal("idle tunnel still open")
	}
	if el := time.Since(t0); el > 2*time.Second {
		t.Errorf("closed after %s (%v), want about the 300ms idle timeout", el, err)
	}
}
