package httpproxy

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// rtFailing answers 503 to the requests fail picks.
func rtFailing(t *testing.T, name string, fail func(n int) bool) *rtUpstream {
	return rtServe(t, name, func(w http.ResponseWriter, r *http.Request, n int) bool {
		if !fail(n) {
			return false
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	})
}

func rtRetryPolicy(name string, rp *pb.RetryPolicy) *pb.OutboundPolicy {
	return rtPolicy(rtRoute("web", &pb.OutboundRule{Backends: []*pb.Backend{rtBackend(name, 1)}, Retry: rp}))
}

// An upstream failing every other request with 503, retried on 5xx up to
// 3 times: every request succeeds, one retry per failure.
func TestRouteRetriesHalfFailingUpstream(t *testing.T) {
	up := rtFailing(t, "b", func(n int) bool { return n%2 == 1 })
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), rtRetryPolicy("b", rtRetry(3)), map[string][]netip.AddrPort{"b": {up.addr}})
	const per = 15
	for _, en := range e.engines(t) {
		for i := range per {
			if res, body := en.do(t, "GET", "/", nil); res.StatusCode != 200 || body != "b" {
				t.Errorf("%s request %d: %d %q, want 200", en.name, i, res.StatusCode, body)
			}
		}
	}
	const requests = 3 * per
	failures := float64(up.hits.Load() / 2) // every odd request
	if up.hits.Load() != 2*requests {
		t.Errorf("upstream got %d requests, want %d", up.hits.Load(), 2*requests)
	}
	rtEventually(t, e.reg, "outbound_http_route_retry_requests_total", "web", failures)
	rtEventually(t, e.reg, "outbound_http_route_retry_successes_total", "web", requests)
	rtEventually(t, e.reg, "outbound_http_route_retry_limit_exceeded_total", "web", 0)
	rtEventually(t, e.reg, "outbound_http_route_retry_overflow_total", "web", 0)
	rtEventually(t, e.reg, "outbound_http_route_request_statuses_total", "web", requests, "http_status", "200", "error", "")
	rtEventually(t, e.reg, "outbound_http_route_backend_requests_total", "web", 2*requests)
	rtEventually(t, e.reg, "outbound_http_route_backend_response_statuses_total", "web", failures, "http_status", "503")
	rtEventually(t, e.reg, "outbound_http_route_backend_response_statuses_total", "web", requests, "http_status", "200")
}

// An upstream that always fails, limit 2 and a budget that allows all:
// exactly 2 retries per request, each request counted as over the limit.
func TestRouteRetryLimit(t *testing.T) {
	up := rtFailing(t, "b", func(int) bool { return true })
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), rtRetryPolicy("b", rtRetry(2)), map[string][]netip.AddrPort{"b": {up.addr}})
	const per = 8
	var wg sync.WaitGroup
	for _, en := range e.engines(t) {
		for range per {
			wg.Go(func() {
				if res, _ := en.do(t, "GET", "/", nil); res.StatusCode != 503 {
					t.Errorf("%s: %d, want the last 503", en.name, res.StatusCode)
				}
			})
		}
	}
	wg.Wait()
	const requests = 3 * per
	if n := up.hits.Load(); n != 3*requests {
		t.Errorf("upstream got %d requests, want %d (3 attempts each)", n, 3*requests)
	}
	rtEventually(t, e.reg, "outbound_http_route_retry_requests_total", "web", 2*requests)
	rtEventually(t, e.reg, "outbound_http_route_retry_limit_exceeded_total", "web", requests)
	rtEventually(t, e.reg, "outbound_http_route_retry_successes_total", "web", 0)
	rtEventually(t, e.reg, "outbound_http_route_retry_overflow_total", "web", 0)
	rtEventually(t, e.reg, "outbound_http_route_request_statuses_total", "web", requests, "http_status", "503", "error", "")
	rtEventually(t, e.reg, "outbound_http_route_backend_requests_total", "web", 3*requests)
}

// A budget of ratio 0.2, no minimum, against an upstream that always
// fails: at most a fifth of 500 requests are retried, the rest counted as
// overflow.
func TestRouteRetryBudget(t *testing.T) {
	up := rtFailing(t, "b", func(int) bool { return true })
	rp := rtRetry(1)
	rp.Budget = &pb.RetryBudget{Ratio: 0.2, MinPerSecond: 0, Ttl: rtDur(10 * time.Second)}
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), rtRetryPolicy("b", rp), map[string][]netip.AddrPort{"b": {up.addr}})
	const requests, workers = 500, 20
	en := e.engine(t, "h1")
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range requests / workers {
				if res, _ := en.do(t, "GET", "/", nil); res.StatusCode != 503 {
					t.Errorf("%d, want 503", res.StatusCode)
				}
			}
		})
	}
	wg.Wait()
	retries := float64(up.hits.Load() - requests)
	if retries > 0.2*requests+1 || retries < 0.15*requests {
		t.Errorf("%v retries of %d requests, want at most 0.2×%d+1 (and the budget used: at least 75 of it)", retries, requests, requests)
	}
	rtEventually(t, e.reg, "outbound_http_route_retry_requests_total", "web", retries)
	rtEventually(t, e.reg, "outbound_http_route_retry_overflow_total", "web", requests-retries)
	rtEventually(t, e.reg, "outbound_http_route_retry_limit_exceeded_total", "web", retries)
	rtEventually(t, e.reg, "outbound_http_route_backend_requests_total", "web", requests+retries)
}

// A 10 KiB POST body is sent again, byte for byte, on the retry.
func TestRouteRetryReplaysTheBody(t *testing.T) {
	up := rtFailing(t, "b", func(n int) bool { return n%2 == 1 })
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), rtRetryPolicy("b", rtRetry(1)), map[string][]netip.AddrPort{"b": {up.addr}})
	body := make([]byte, 10<<10)
	for i := range body {
		body[i] = byte(rand.Uint32())
	}
	for _, en := range e.engines(t) {
		before := len(up.seen)
		for _, chunked := range []bool{false, true} {
			var rd io.Reader = bytes.NewReader(body)
			if chunked {
				rd = io.MultiReader(rd) // no length known: chunked (HTTP/1) or no content-length (h2)
			}
			if res, got := en.do(t, "POST", "/upload", rd); res.StatusCode != 200 || got != "b" {
				t.Fatalf("%s chunked=%v: %d %q (%s), want 200 from the retry", en.name, chunked, res.StatusCode, got, res.Header.Get(ErrorHeader))
			}
		}
		up.mu.Lock()
		seen := up.seen[before:]
		if len(seen) != 4 {
			t.Errorf("%s: upstream got %d requests, want 4", en.name, len(seen))
		}
		for i, s := range seen {
			if !bytes.Equal(s.body, body) {
				t.Errorf("%s: attempt %d carried %d bytes (equal %v), want the %d sent", en.name, i, len(s.body), bytes.Equal(s.body, body), len(body))
			}
		}
		up.mu.Unlock()
	}
	rtEventually(t, e.reg, "outbound_http_route_retry_requests_total", "web", 6)
	rtEventually(t, e.reg, "outbound_http_route_retry_successes_total", "web", 6)
}

// A 100 KiB body is more than the proxy holds for replay: the failure is
// answered, the retry counted as overflow and the limit as retry-body.
func TestRouteRetryLargeBodyIsNotRetried(t *testing.T) {
	up := rtFailing(t, "b", func(int) bool { return true })
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), rtRetryPolicy("b", rtRetry(3)), map[string][]netip.AddrPort{"b": {up.addr}})
	body := bytes.Repeat([]byte("0123456789abcdef"), 100<<10/16)
	for _, en := range e.engines(t) {
		if res, _ := en.do(t, "POST", "/upload", bytes.NewReader(body)); res.StatusCode != 503 {
			t.Errorf("%s: %d, want the upstream's 503", en.name, res.StatusCode)
		}
	}
	if n := up.hits.Load(); n != 3 {
		t.Errorf("upstream got %d requests, want 3 (no retries)", n)
	}
	for _, s := range up.seen {
		if !bytes.Equal(s.body, body) {
			t.Errorf("upstream got %d bytes, want the %d sent", len(s.body), len(body))
		}
	}
	rtEventually(t, e.reg, "outbound_http_route_retry_overflow_total", "web", 3)
	rtEventually(t, e.reg, "outbound_http_route_retry_requests_total", "web", 0)
	if n := counter(t, e.reg, "limit_exceeded_total", "limit", metrics.LimitRetryBody); n != 3 {
		t.Errorf("limit_exceeded_total{limit=%q} = %v, want 3", metrics.LimitRetryBody, n)
	}
}

// A backend whose first endpoint refuses connections: the attempt is
// retried (a connect error reached no server), even for a POST.
func TestRouteRetryAfterConnectRefused(t *testing.T) {
	up := rtServe(t, "b", nil)
	ln := rtListen(t)
	refused := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), rtRetryPolicy("b", rtRetry(1)),
		map[string][]netip.AddrPort{"b": {refused, up.addr}})
	for _, en := range e.engines(t) {
		if res, body := en.do(t, "POST", "/", strings.NewReader("payload")); res.StatusCode != 200 || body != "b" {
			t.Errorf("%s: %d %q (%s), want 200 from the second endpoint", en.name, res.StatusCode, body, res.Header.Get(ErrorHeader))
		}
	}
	for _, s := range up.seen {
		if string(s.body) != "payload" {
			t.Errorf("upstream got body %q", s.body)
		}
	}
	rtEventually(t, e.reg, "outbound_http_route_retry_requests_total", "web", 3)
	rtEventually(t, e.reg, "outbound_http_route_backend_requests_total", "web", 6)
	rtEventually(t, e.reg, "outbound_http_route_request_statuses_total", "web", 3, "http_status", "200", "error", "")
}

// An upstream that drops the connection without answering every other
// request: a GET is retried under a 5xx policy (the proxy would answer
// 502), a POST is not (the server may have acted on it).
func TestRouteRetryAfterUpstreamReset(t *testing.T) {
	up := rtServe(t, "b", func(w http.ResponseWriter, r *http.Request, n int) bool {
		if n%2 == 1 {
			panic(http.ErrAbortHandler) // closes (HTTP/1) or resets (h2) without a response
		}
		return false
	})
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), rtRetryPolicy("b", rtRetry(1)), map[string][]netip.AddrPort{"b": {up.addr}})
	for _, en := range e.engines(t) {
		if res, body := en.do(t, "GET", "/", nil); res.StatusCode != 200 || body != "b" {
			t.Errorf("%s: GET %d %q (%s), want 200 after a retry", en.name, res.StatusCode, body, res.Header.Get(ErrorHeader))
		}
		if res, _ := en.do(t, "POST", "/", strings.NewReader("x")); res.StatusCode != http.StatusBadGateway {
			t.Errorf("%s: POST %d, want 502 (not retried)", en.name, res.StatusCode)
		}
	}
	// net/http's transport itself re-sends a GET whose pooled connection
	// closed unanswered, so not every reset reaches the route's retry;
	// the first one, on a new connection, always does.
	if n := rtCount(t, e.reg, "outbound_http_route_retry_requests_total", "web"); n < 1 {
		t.Errorf("route retries %v, want at least 1", n)
	}
}

// A response timeout is never retried, and a per-attempt timeout only for
// an idempotent request: a POST the server may be acting on reaches it
// once.
func TestRouteTimeoutRetriesOnlyIdempotent(t *testing.T) {
	for _, c := range []struct {
		name       string
		rule       func(*pb.OutboundRule)
		getAttempt int32 // upstream requests a GET makes
	}{
		{"response timeout", func(r *pb.OutboundRule) { r.Timeouts = &pb.Timeouts{Response: rtDur(150 * time.Millisecond)} }, 1},
		{"per-attempt timeout", func(r *pb.OutboundRule) { r.Retry.AttemptTimeout = rtDur(150 * time.Millisecond) }, 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			slow := atomic.Bool{}
			up := rtServe(t, "b", func(w http.ResponseWriter, r *http.Request, n int) bool {
				if slow.CompareAndSwap(true, false) {
					select {
					case <-r.Context().Done():
					case <-time.After(400 * time.Millisecond):
					}
				}
				return false
			})
			rule := &pb.OutboundRule{Backends: []*pb.Backend{rtBackend("b", 1)}, Retry: rtRetry(2)}
			c.rule(rule)
			e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), rtPolicy(rtRoute("web", rule)), map[string][]netip.AddrPort{"b": {up.addr}})
			en := e.engine(t, "h1")
			slow.Store(true)
			before := up.hits.Load()
			en.do(t, "POST", "/", strings.NewReader("once"))
			if got := up.hits.Load() - before; got != 1 {
				t.Errorf("POST reached the upstream %d times, want 1", got)
			}
			slow.Store(true)
			before = up.hits.Load()
			en.do(t, "GET", "/", nil)
			if got := up.hits.Load() - before; got != c.getAttempt {
				t.Errorf("GET reached the upstream %d times, want %d", got, c.getAttempt)
			}
		})
	}
}

// healthFlaky answers Check UNAVAILABLE (trailers-only) to the calls fail
// picks, waits for the call to end when slow picks it, and SERVING
// otherwise.
type healthFlaky struct {
	healthpb.UnimplementedHealthServer
	n          atomic.Int32
	fail, slow func(n int) bool
	cancelled  chan struct{}
}

func (h *healthFlaky) Check(ctx context.Context, _ *healthpb.HealthCheckRequest) (*healthpb.HealthCheckResponse, error) {
	n := int(h.n.Add(1))
	switch {
	case h.fail != nil && h.fail(n):
		return nil, status.Error(codes.Unavailable, "not yet")
	case h.slow != nil && h.slow(n):
		select {
		case <-ctx.Done():
			h.cancelled <- struct{}{}
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(2 * time.Second):
		}
	}
	return &healthpb.HealthCheckResponse{Status: healthpb.HealthCheckResponse_SERVING}, nil
}

func rtGRPCServer(t *testing.T, h *healthFlaky) netip.AddrPort {
	ln := rtListen(t)
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, h)
	go s.Serve(ln)
	t.Cleanup(s.Stop)
	return netip.MustParseAddrPort(ln.Addr().String())
}

func rtGRPCClient(t *testing.T, addr string) healthpb.HealthClient {
	cc, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return healthpb.NewHealthClient(cc)
}

// A GRPCRoute retrying code 14: an UNAVAILABLE answer (trailers-only) is
// retried and the call succeeds; the outbound_grpc_route_* series count it.
func TestRouteGRPCUnavailableIsRetried(t *testing.T) {
	h := &healthFlaky{fail: func(n int) bool { return n%2 == 1 }}
	addr := rtGRPCServer(t, h)
	pol := rtPolicy(rtGRPCRoute("health", &pb.OutboundRule{Backends: []*pb.Backend{rtBackend("grpc", 1)}, Retry: rtRetry(2, 14)}))
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), pol, map[string][]netip.AddrPort{"grpc": {addr}})
	c := rtGRPCClient(t, e.httpAddr)
	const calls = 5
	for i := range calls {
		res, err := c.Check(context.Background(), &healthpb.HealthCheckRequest{})
		if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Fatalf("call %d: %v %v, want SERVING after a retry", i, res, err)
		}
	}
	if n := h.n.Load(); n != 2*calls {
		t.Errorf("server got %d calls, want %d", n, 2*calls)
	}
	rtEventually(t, e.reg, "outbound_grpc_route_retry_requests_total", "health", calls)
	rtEventually(t, e.reg, "outbound_grpc_route_retry_successes_total", "health", calls)
	rtEventually(t, e.reg, "outbound_grpc_route_request_statuses_total", "health", calls, "grpc_status", "0", "error", "")
	rtEventually(t, e.reg, "outbound_grpc_route_backend_response_statuses_total", "health", calls, "grpc_status", "14")
	rtEventually(t, e.reg, "outbound_grpc_route_backend_requests_total", "health", 2*calls)
	if n := rtCount(t, e.reg, "outbound_http_route_retry_requests_total", "health"); n != 0 {
		t.Errorf("outbound_http_route_retry_requests_total = %v for a GRPCRoute, want 0", n)
	}
}

// A GRPCRoute's request timeout answers DEADLINE_EXCEEDED trailers-only
// (HTTP 200, grpc-status 4) and cancels the call upstream.
func TestRouteGRPCTimeout(t *testing.T) {
	h := &healthFlaky{slow: func(int) bool { return true }, cancelled: make(chan struct{}, 4)}
	addr := rtGRPCServer(t, h)
	pol := rtPolicy(rtGRPCRoute("health", &pb.OutboundRule{
		Backends: []*pb.Backend{rtBackend("grpc", 1)},
		Timeouts: &pb.Timeouts{Request: rtDur(300 * time.Millisecond)},
	}))
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), pol, map[string][]netip.AddrPort{"grpc": {addr}})
	start := time.Now()
	_, err := rtGRPCClient(t, e.httpAddr).Check(context.Background(), &healthpb.HealthCheckRequest{})
	if d := time.Since(start); status.Code(err) != codes.DeadlineExceeded || d < 300*time.Millisecond || d > 450*time.Millisecond {
		t.Errorf("grpc-go client: %v after %s, want DEADLINE_EXCEEDED after 300–450ms", err, d)
	}
	// The same over h2c by hand, to see the trailers-only answer.
	frame := []byte{0, 0, 0, 0, 0} // an empty HealthCheckRequest
	res, body := e.engine(t, "h2c").do(t, "POST", "/grpc.health.v1.Health/Check", bytes.NewReader(frame),
		"Content-Type", "application/grpc", "Te", "trailers")
	if res.StatusCode != 200 || res.Header.Get("Grpc-Status") != "4" || res.Header.Get(ErrorHeader) != ReasonRouteTimeout || body != "" {
		t.Errorf("h2c: %d grpc-status %q %s %q, want 200, trailers-only grpc-status 4 %s", res.StatusCode,
			res.Header.Get("Grpc-Status"), res.Header.Get(ErrorHeader), body, ReasonRouteTimeout)
	}
	for range 2 {
		select {
		case <-h.cancelled:
		case <-time.After(time.Second):
			t.Fatal("the call was not cancelled upstream")
		}
	}
	rtEventually(t, e.reg, "outbound_grpc_route_request_statuses_total", "health", 2, "grpc_status", "4", "error", metrics.RouteErrRequestTimeout)
}

// replayBody on its own.

// rtChunks is a body that delivers its chunks one Read at a time.
type rtChunks struct {
	chunks [][]byte
	reads  int
}

func (c *rtChunks) Read(p []byte) (int, error) {
	if len(c.chunks) == 0 {
		return 0, io.EOF
	}
	c.reads++
	n := copy(p, c.chunks[0])
	if c.chunks[0] = c.chunks[0][n:]; len(c.chunks[0]) == 0 {
		c.chunks = c.chunks[1:]
	}
	return n, nil
}

func (c *rtChunks) Close() error { return nil }

func rtRandom(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return b
}

func TestReplayBodyRetrySeesTheSameBytes(t *testing.T) {
	want := rtRandom(30 << 10)
	b := newReplayBody(io.NopCloser(bytes.NewReader(want)))
	first := b.attempt()
	part := make([]byte, 12345)
	if _, err := io.ReadFull(first, part); err != nil {
		t.Fatal(err)
	}
	if !b.replayable() {
		t.Fatal("not replayable after 12345 bytes")
	}
	second := b.attempt()
	got, err := io.ReadAll(second)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("retry read %d bytes (%v), equal %v; want the %d sent", len(got), err, bytes.Equal(got, want), len(want))
	}
	if !bytes.Equal(part, want[:len(part)]) {
		t.Error("the first attempt read other bytes")
	}
	third := b.attempt()
	if got, err := io.ReadAll(third); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("a third attempt read %d bytes (%v)", len(got), err)
	}
}

func TestReplayBodyStaleAttemptFails(t *testing.T) {
	b := newReplayBody(io.NopCloser(bytes.NewReader(rtRandom(100))))
	first := b.attempt()
	buf := make([]byte, 10)
	if _, err := first.Read(buf); err != nil {
		t.Fatal(err)
	}
	second := b.attempt()
	if n, err := first.Read(buf); !errors.Is(err, errStaleAttempt) || n != 0 {
		t.Errorf("stale attempt read %d, %v; want 0, errStaleAttempt", n, err)
	}
	if got, err := io.ReadAll(second); err != nil || len(got) != 100 {
		t.Errorf("the newest attempt read %d bytes (%v), want 100", len(got), err)
	}
	if n, err := first.Read(buf); !errors.Is(err, errStaleAttempt) || n != 0 {
		t.Errorf("stale attempt after EOF read %d, %v; want 0, errStaleAttempt", n, err)
	}
}

func TestReplayBodyOverflow(t *testing.T) {
	for _, size := range []int{MaxReplayBody, MaxReplayBody + 1} {
		want := rtRandom(size)
		b := newReplayBody(&rtChunks{chunks: [][]byte{want[:1000], want[1000:]}})
		got, err := io.ReadAll(b.attempt())
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: the first attempt read %d (%v)", size, len(got), err)
		}
		if b.replayable() != (size <= MaxReplayBody) {
			t.Errorf("%d bytes: replayable %v, want %v", size, b.replayable(), size <= MaxReplayBody)
		}
	}
}

// A body the client is still sending when the first attempt failed: the
// retry sends what was read, then the rest as it arrives — even past
// MaxReplayBody (only a third attempt is then impossible).
func TestReplayBodyStillStreamingIsContinued(t *testing.T) {
	for _, rest := range []int{20 << 10, MaxReplayBody} {
		want := rtRandom(10<<10 + rest)
		pr, pw := io.Pipe()
		b := newReplayBody(pr)
		retried := make(chan struct{})
		go func() {
			pw.Write(want[:10<<10])
			<-retried // the rest comes once the retry has begun
			for i := 10 << 10; i < len(want); i += 4 << 10 {
				pw.Write(want[i:min(i+4<<10, len(want))])
			}
			pw.Close()
		}()
		first := b.attempt()
		if _, err := io.ReadFull(first, make([]byte, 10<<10)); err != nil {
			t.Fatal(err)
		}
		// The first attempt failed here; the client is still sending.
		second := b.attempt()
		close(retried)
		got, err := io.ReadAll(second)
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("rest %d: the retry read %d bytes (%v), equal %v; want %d", rest, len(got), err, bytes.Equal(got, want), len(want))
		}
		if wantReplay := len(want) <= MaxReplayBody; b.replayable() != wantReplay {
			t.Errorf("rest %d: replayable %v after %d bytes, want %v", rest, b.replayable(), len(want), wantReplay)
		}
	}
}

// A client stream (gRPC): the client sends one message and waits for the
// answer before it sends more or ends. The first attempt is answered
// UNAVAILABLE while its body is still open: the retry must go out at
// once with the message read so far, not wait for the client.
func TestRouteRetryOfAStreamThatIsStillOpen(t *testing.T) {
	msg := []byte{0, 0, 0, 0, 3, 'a', 'b', 'c'}
	var hits atomic.Int32
	got := make(chan []byte, 2)
	addr := rtH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := hits.Add(1)
		b := make([]byte, len(msg))
		io.ReadFull(r.Body, b)
		got <- b
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", map[bool]string{true: "14", false: "0"}[n == 1])
	}))
	pol := rtPolicy(rtGRPCRoute("stream", &pb.OutboundRule{Backends: []*pb.Backend{rtBackend("b", 1)}, Retry: rtRetry(1, 14)}))
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), pol, map[string][]netip.AddrPort{"b": {addr}})
	en := e.engine(t, "h2c")
	pr, pw := io.Pipe()
	defer pw.Close()
	go pw.Write(msg)
	req, _ := http.NewRequest("POST", en.base+"/pkg.Svc/Stream", pr)
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	type result struct {
		res *http.Response
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := en.c.Do(req)
		done <- result{res, err}
	}()
	select {
	case r := <-done:
		if r.err != nil || r.res.StatusCode != 200 || r.res.Header.Get("Grpc-Status") != "0" {
			t.Fatalf("%v %v (grpc-status %q), want 200 grpc-status 0 from the retry", r.res, r.err, r.res.Header.Get("Grpc-Status"))
		}
		r.res.Body.Close()
	case <-time.After(2 * time.Second):
		t.Fatal("no answer within 2s: the retry waits for the client to send more")
	}
	for i := range 2 {
		if b := <-got; !bytes.Equal(b, msg) {
			t.Errorf("attempt %d carried %q, want %q", i, b, msg)
		}
	}
	rtEventually(t, e.reg, "outbound_grpc_route_retry_requests_total", "stream", 1)
}

// An earlier attempt still waiting for the client's next bytes (its
// transport writes on until it notices) blocks neither the retry decision
// nor the new attempt's replay of what was recorded; the bytes it then
// reads go to the new attempt.
func TestReplayBodyStaleReaderBlocksNothing(t *testing.T) {
	pr, pw := io.Pipe()
	src := newEnteringReader(pr)
	b := newReplayBody(src)
	first := b.attempt()
	go pw.Write([]byte("head"))
	buf := make([]byte, 64)
	if n, err := first.Read(buf); err != nil || string(buf[:n]) != "head" {
		t.Fatalf("first read %q %v", buf[:n], err)
	}
	staleDone := make(chan error, 1)
	go func() {
		_, err := first.Read(make([]byte, 64)) // waits for the client
		staleDone <- err
	}()
	src.waitReads(t, 2) // the first attempt's, then the stale one's, which waits
	decided := make(chan *attemptBody, 1)
	go func() {
		if b.replayable() {
			decided <- b.attempt().(*attemptBody)
		}
	}()
	var second *attemptBody
	select {
	case second = <-decided:
	case <-time.After(time.Second):
		t.Fatal("replayable or attempt waited for the client")
	}
	if n, err := second.Read(buf); err != nil || string(buf[:n]) != "head" {
		t.Fatalf("the retry replayed %q %v, want head", buf[:n], err)
	}
	go func() {
		pw.Write([]byte("tail"))
		pw.Close()
	}()
	if err := <-staleDone; !errors.Is(err, errStaleAttempt) {
		t.Errorf("the stale read ended with %v, want errStaleAttempt", err)
	}
	if rest, err := io.ReadAll(second); err != nil || string(rest) != "tail" {
		t.Errorf("the retry read on %q %v, want tail", rest, err)
	}
}

// Bytes an earlier attempt read past MaxReplayBody are gone: the newer
// attempt fails rather than send a body with a hole in it.
func TestReplayBodyHoleFailsTheNewerAttempt(t *testing.T) {
	pr, pw := io.Pipe()
	src := newEnteringReader(pr)
	b := newReplayBody(src)
	first := b.attempt()
	go pw.Write([]byte("head"))
	buf := make([]byte, 2*MaxReplayBody)
	if n, err := first.Read(buf); err != nil || n != 4 {
		t.Fatalf("first read %d %v", n, err)
	}
	staleDone := make(chan error, 1)
	go func() {
		_, err := first.Read(buf) // waits for the client, then gets a lot at once
		staleDone <- err
	}()
	src.waitReads(t, 2) // the first attempt's, then the stale one's, which waits
	second := b.attempt()
	go pw.Write(rtRandom(MaxReplayBody))
	if err := <-staleDone; !errors.Is(err, errStaleAttempt) {
		t.Fatalf("stale read: %v", err)
	}
	if b.replayable() {
		t.Error("replayable after MaxReplayBody was passed")
	}
	if n, err := second.Read(make([]byte, 64)); !errors.Is(err, errBodyLost) {
		t.Errorf("the newer attempt read %d, %v; want errBodyLost", n, err)
	}
}

// A gRPC stream whose server sends headers and then waits for the
// client's first message, which the client sends only once it has the
// headers: a retry policy with gRPC codes must not hold the headers
// back waiting for a body (that would deadlock until a timeout).
func TestRouteGRPCRetryDoesNotHoldHeadersOfAWaitingStream(t *testing.T) {
	up := rtH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/grpc")
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		io.ReadAll(r.Body) // the client's messages, after our headers
		w.Header().Set(http.TrailerPrefix+"Grpc-Status", "0")
	}))
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), rtRetryPolicy("b", rtRetry(2, 14)), map[string][]netip.AddrPort{"b": {up}})
	en := e.engine(t, "h2c")
	pr, pw := io.Pipe()
	defer pw.Close()
	req, _ := http.NewRequest("POST", en.base+"/pkg.Svc/Stream", pr)
	req.Host = "web.ns"
	req.Header.Set("Content-Type", "application/grpc")
	got := make(chan *http.Response, 1)
	go func() {
		res, err := en.c.Do(req)
		if err != nil {
			t.Error(err)
			close(got)
			return
		}
		got <- res
	}()
	select {
	case res := <-got:
		if res == nil {
			return
		}
		pw.Write([]byte{0, 0, 0, 0, 0})
		pw.Close()
		io.ReadAll(res.Body)
		res.Body.Close()
		if s := res.Trailer.Get("Grpc-Status"); s != "0" {
			t.Errorf("grpc-status %q, want 0", s)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("no response headers in 2s: the proxy held them waiting for a body")
	}
}

// enteringReader tells each time a Read of the client's body begins: a
// reader past that point waits for the client.
type enteringReader struct {
	io.ReadCloser
	entered chan struct{}
}

func newEnteringReader(r io.ReadCloser) *enteringReader {
	return &enteringReader{ReadCloser: r, entered: make(chan struct{}, 64)}
}

func (r *enteringReader) Read(p []byte) (int, error) {
	select {
	case r.entered <- struct{}{}:
	default: // more than anyone waits for
	}
	return r.ReadCloser.Read(p)
}

// waitReads waits until n Reads have begun.
func (r *enteringReader) waitReads(t *testing.T, n int) {
	t.Helper()
	for i := range n {
		select {
		case <-r.entered:
		case <-time.After(2 * time.Second):
			t.Fatalf("%d of %d reads of the client's body began", i, n)
		}
	}
}
