package proxy

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/keepalive"

	"github.com/plexus-mesh/plexus/testsupport/loadgen"
)

// quickService answers UnaryCall at once.
type quickService struct {
	testpb.UnimplementedTestServiceServer
}

func (quickService) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{}, nil
}

// TestGRPCGoAwayLosesNothing: a gRPC server that ends every connection
// after 100 ms with GOAWAY (MaxConnectionAge, as servers do to spread
// clients over replicas) loses no call of 3,000 sent at 1,000 req/s
// through the proxy: calls in flight on a going-away connection finish
// there, new ones go on a new connection.
func TestGRPCGoAwayLosesNothing(t *testing.T) {
	gs := grpc.NewServer(grpc.KeepaliveParams(keepalive.ServerParameters{
		MaxConnectionAge: 100 * time.Millisecond, MaxConnectionAgeGrace: 10 * time.Second,
	}))
	testpb.RegisterTestServiceServer(gs, quickService{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(ln)
	defer gs.Stop()
	h := start(t, nil)
	h.to(ln.Addr().String())
	client := testpb.NewTestServiceClient(grpcThrough(t, h))
	res, err := loadgen.Run(context.Background(), loadgen.Config{
		Rate: 1000, Duration: 3 * time.Second, Workers: 32,
		Do: func(ctx context.Context, _ int) error {
			ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := client.UnaryCall(ctx, &testpb.SimpleRequest{})
			return err
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors > 0 || len(res.Latencies) != 3000 {
		t.Fatalf("%d calls answered, %d failed; the first: %v", len(res.Latencies), res.Errors, res.FirstErr)
	}
	// The upstream connections really went away: many were opened.
	if n := h.metric(t, "tcp_open_total", map[string]string{"direction": "outbound", "peer": "dst"}); n < 10 {
		t.Errorf("%v upstream connections opened in 3 s with a 100 ms connection age, want ≥ 10", n)
	}
}
