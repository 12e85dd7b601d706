package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// echoService answers every FullDuplexCall message at once with its payload.
type echoService struct {
	testpb.UnimplementedTestServiceServer
}

func (echoService) FullDuplexCall(s grpc.BidiStreamingServer[testpb.StreamingOutputCallRequest, testpb.StreamingOutputCallResponse]) error {
	for {
		req, err := s.Recv()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		if err := s.Send(&testpb.StreamingOutputCallResponse{Payload: req.Payload}); err != nil {
			return err
		}
	}
}

// TestGRPCBidiStreamingPingPong proves the proxy is full duplex for
// HTTP/2: each reply must arrive before the client sends its next message
// (a proxy that buffered the request stream until it ends would deadlock).
func TestGRPCBidiStreamingPingPong(t *testing.T) {
	gs := grpc.NewServer()
	testpb.RegisterTestServiceServer(gs, echoService{})
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	go gs.Serve(ln)
	defer gs.Stop()
	h := start(t, nil)
	h.to(ln.Addr().String())
	client := testpb.NewTestServiceClient(grpcThrough(t, h))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stream, err := client.FullDuplexCall(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		body := []byte(fmt.Sprintf("message %d", i))
		if err := stream.Send(&testpb.StreamingOutputCallRequest{Payload: &testpb.Payload{Body: body}}); err != nil {
			t.Fatal(err)
		}
		res, err := stream.Recv()
		if err != nil || string(res.GetPayload().GetBody()) != string(body) {
			t.Fatalf("reply %d = %v, %v", i, res, err)
		}
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != io.EOF {
		t.Fatalf("end of stream = %v, want EOF (status OK)", err)
	}
	waitFor(t, "response_total{grpc_status=0}", func() bool {
		return h.metric(t, "response_total", map[string]string{"grpc_status": "0", "classification": "success"}) == 1
	})
}
