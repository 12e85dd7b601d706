package meshbench

import (
	"context"
	"net/http"
	"time"

	testpb "google.golang.org/grpc/interop/grpc_testing"

	"github.com/plexus-mesh/plexus/testsupport/loadgen"
)

// protocol is how the client talks to a path: the request a loadgen
// worker makes, over connections opened for one cell and closed after it.
type protocol struct {
	name string
	open func(t *Topology, port, workers int) (do func(ctx context.Context, worker int) error, closeFn func(), err error)
}

var (
	http1 = protocol{name: protoHTTP1, open: func(t *Topology, port, workers int) (func(context.Context, int) error, func(), error) {
		c := t.Client(workers)
		return httpGet(c, URL(port)), c.CloseIdleConnections, nil
	}}
	h2c = protocol{name: "h2c", open: func(t *Topology, port, _ int) (func(context.Context, int) error, func(), error) {
		c := t.H2CClient()
		return httpGet(c, URL(port)), c.CloseIdleConnections, nil
	}}
	grpcUnary = protocol{name: "gRPC unary", open: func(t *Topology, port, _ int) (func(context.Context, int) error, func(), error) {
		conn, err := t.GRPCConn(port)
		if err != nil {
			return nil, nil, err
		}
		c := testpb.NewTestServiceClient(conn)
		do := func(ctx context.Context, _ int) error {
			ctx, cancel := context.WithTimeout(ctx, requestTimeout)
			defer cancel()
			_, err := c.UnaryCall(ctx, &testpb.SimpleRequest{})
			return err
		}
		return do, func() { conn.Close() }, nil
	}}
	// grpcStreaming sends one message per request on a bidirectional
	// stream each worker keeps open, and waits for its answer. A stream
	// that fails or takes longer than requestTimeout is dropped; the
	// worker's next request opens another.
	grpcStreaming = protocol{name: "gRPC streaming", open: func(t *Topology, port, workers int) (func(context.Context, int) error, func(), error) {
		conn, err := t.GRPCConn(port)
		if err != nil {
			return nil, nil, err
		}
		c := testpb.NewTestServiceClient(conn)
		type stream struct {
			s      testpb.TestService_FullDuplexCallClient
			cancel context.CancelFunc
		}
		streams := make([]stream, workers)
		do := func(ctx context.Context, worker int) error {
			st := &streams[worker]
			if st.s == nil {
				sctx, cancel := context.WithCancel(ctx)
				s, err := c.FullDuplexCall(sctx)
				if err != nil {
					cancel()
					return err
				}
				st.s, st.cancel = s, cancel
			}
			timer := time.AfterFunc(requestTimeout, st.cancel)
			err := st.s.Send(&testpb.StreamingOutputCallRequest{})
			if err == nil {
				_, err = st.s.Recv()
			}
			timer.Stop()
			if err != nil {
				st.cancel()
				st.s = nil
			}
			return err
		}
		closeFn := func() {
			for _, st := range streams {
				if st.cancel != nil {
					st.cancel()
				}
			}
			conn.Close()
		}
		return do, closeFn, nil
	}}
)

// requestTimeout bounds every request, as the HTTP clients' Timeout does.
const requestTimeout = 10 * time.Second

func httpGet(c *http.Client, url string) func(context.Context, int) error {
	return func(ctx context.Context, _ int) error { return loadgen.Get(ctx, c, url) }
}
