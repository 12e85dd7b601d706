package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// slowService answers UnaryCall after 2 s unless the call ends first; it
// tells on ended what it saw: the deadline the call arrived with
// (zero: none) and when its context ended (zero: it answered).
type slowService struct {
	testpb.UnimplementedTestServiceServer
	ended chan slowCall
}

type slowCall struct {
	deadlineIn time.Duration
	canceledAt time.Time
}

func (s slowService) UnaryCall(ctx context.Context, _ *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	var c slowCall
	if dl, ok := ctx.Deadline(); ok {
		c.deadlineIn = time.Until(dl)
	}
	defer func() { s.ended <- c }()
	select {
	case <-time.After(2 * time.Second):
		return &testpb.SimpleResponse{}, nil
	case <-ctx.Done():
		c.canceledAt = time.Now()
		return nil, ctx.Err()
	}
}

// StreamingOutputCall sends one message at once, then nothing until the
// call ends.
func (s slowService) StreamingOutputCall(_ *testpb.StreamingOutputCallRequest, stream grpc.ServerStreamingServer[testpb.StreamingOutputCallResponse]) error {
	var c slowCall
	defer func() { s.ended <- c }()
	if err := stream.Send(&testpb.StreamingOutputCallResponse{}); err != nil {
		return err
	}
	<-stream.Context().Done()
	c.canceledAt = time.Now()
	return stream.Context().Err()
}

func startSlowService(t *testing.T) (string, chan slowCall) {
	ended := make(chan slowCall, 1)
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, slowService{ended: ended})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	return ln.Addr().String(), ended
}

// TestGRPCDeadline: a client with a 300 ms deadline against a server that
// takes 2 s gets DEADLINE_EXCEEDED within 350 ms, and the server sees
// its call canceled, with the deadline forwarded to it.
func TestGRPCDeadline(t *testing.T) {
	addr, ended := startSlowService(t)
	h := start(t, nil)
	h.to(addr)
	client := testpb.NewTestServiceClient(grpcThrough(t, h))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
	took := time.Since(begin)
	if status.Code(err) != codes.DeadlineExceeded || took > 350*time.Millisecond {
		t.Fatalf("after %v: %v, want DEADLINE_EXCEEDED within 350 ms", took, err)
	}
	c := <-ended
	if c.canceledAt.IsZero() || c.canceledAt.Sub(begin) > 500*time.Millisecond {
		t.Errorf("the server's call was not canceled in time: %+v (began %v)", c, begin)
	}
	if c.deadlineIn <= 0 || c.deadlineIn > 300*time.Millisecond {
		t.Errorf("the server's call arrived with %v left, want the client's deadline (≤ 300 ms)", c.deadlineIn)
	}
}

// emptyCallWithin300ms is a gRPC call of the test service's method with
// an empty message and grpc-timeout 300 ms, made by hand: a client that
// sends the deadline but does not keep it itself.
func emptyCallWithin300ms(method string) *http.Request {
	req, _ := http.NewRequest(http.MethodPost, "http://svc.example/grpc.testing.TestService/"+method, strings.NewReader("\x00\x00\x00\x00\x00"))
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("Grpc-Timeout", "300m")
	return req
}

// TestGRPCDeadlineHeldByProxy: a client that sends grpc-timeout but does
// not keep it itself gets the proxy's DEADLINE_EXCEEDED, trailers-only,
// saying why; the server's call is canceled, and the metrics count it.
func TestGRPCDeadlineHeldByProxy(t *testing.T) {
	addr, ended := startSlowService(t)
	h := start(t, nil)
	h.to(addr)
	req := emptyCallWithin300ms("UnaryCall")
	begin := time.Now()
	res, err := h.client(true).Do(req)
	took := time.Since(begin)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if took < 300*time.Millisecond || took > time.Second {
		t.Errorf("answered after %v, want at the 300 ms deadline", took)
	}
	if res.Header.Get("Grpc-Status") != "4" || !strings.Contains(res.Header.Get("Grpc-Message"), "grpc-timeout passed") ||
		res.Header.Get("plexus-proxy-error") != "grpc-deadline" {
		t.Errorf("answer: %d %v, want trailers-only grpc-status 4 naming the grpc-timeout", res.StatusCode, res.Header)
	}
	if c := <-ended; c.canceledAt.IsZero() {
		t.Errorf("the server's call ran to its end: %+v", c)
	}
	waitFor(t, "response_total{error=grpc-deadline}", func() bool {
		return h.metric(t, "response_total", map[string]string{"grpc_status": "4", "error": "grpc-deadline"}) == 1
	})
}

// TestGRPCDeadlineCutsAStream: a server stream that has sent its headers
// and a message is ended at the call's grpc-timeout with the status in
// the trailers (DEADLINE_EXCEEDED, saying why), not a reset.
func TestGRPCDeadlineCutsAStream(t *testing.T) {
	addr, ended := startSlowService(t)
	h := start(t, nil)
	h.to(addr)
	res, err := h.client(true).Do(emptyCallWithin300ms("StreamingOutputCall"))
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || len(body) == 0 {
		t.Fatalf("body %q, %v: want the server's message, then a clean end", body, err)
	}
	if res.Trailer.Get("Grpc-Status") != "4" || !strings.Contains(res.Trailer.Get("Grpc-Message"), "grpc-timeout passed") {
		t.Errorf("trailers %v, want grpc-status 4 naming the grpc-timeout", res.Trailer)
	}
	if c := <-ended; c.canceledAt.IsZero() {
		t.Errorf("the server's stream was not canceled")
	}
}
