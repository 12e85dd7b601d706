package meshbench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
)

// responseBody is what the benchmark server answers: small, like an API
// response, so the proxies' overhead is what is measured.
var responseBody = []byte(`{"status":"ok","service":"meshbench"}` + "\n")

// Serve starts the benchmark servers inside the server namespace on every
// path's port (HTTP/1.1, h2c and gRPC) and returns a function that stops
// them.
func (t *Topology) Serve() (stop func(), err error) {
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(responseBody)
	})
	var stops []func()
	stop = func() {
		for _, s := range stops {
			s()
		}
	}
	var h2c http.Protocols
	h2c.SetHTTP1(true)
	h2c.SetUnencryptedHTTP2(true)
	h2cPorts := []int{portDirectH2C, portPlexusH2C, portNginxH2C, portHAProxyH2C}
	for _, port := range append([]int{portDirect, portPlexus, portNginx, portPlexusMTLS, portNginxMTLS, portHAProxyMTLS}, h2cPorts...) {
		ln, err := t.listenServer(port)
		if err != nil {
			stop()
			return nil, err
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
		if slices.Contains(h2cPorts, port) {
			srv.Protocols = &h2c
		}
		stops = append(stops, func() { srv.Close() })
		go srv.Serve(ln)
	}
	for _, port := range []int{portDirectGRPC, portPlexusGRPC, portNginxGRPC, portHAProxyGRPC} {
		ln, err := t.listenServer(port)
		if err != nil {
			stop()
			return nil, err
		}
		gs := grpc.NewServer()
		testpb.RegisterTestServiceServer(gs, testService{})
		stops = append(stops, gs.Stop)
		go gs.Serve(ln)
	}
	return stop, nil
}

// testService answers the two gRPC calls the benchmark makes with the
// same small payload as the HTTP server.
type testService struct {
	testpb.UnimplementedTestServiceServer
}

func (testService) UnaryCall(context.Context, *testpb.SimpleRequest) (*testpb.SimpleResponse, error) {
	return &testpb.SimpleResponse{Payload: &testpb.Payload{Body: responseBody}}, nil
}

func (testService) FullDuplexCall(stream testpb.TestService_FullDuplexCallServer) error {
	for {
		if _, err := stream.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if err := stream.Send(&testpb.StreamingOutputCallResponse{Payload: &testpb.Payload{Body: responseBody}}); err != nil {
			return err
		}
	}
}

// dial opens a TCP connection from the client namespace.
func (t *Topology) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	dialer := &net.Dialer{Timeout: 5 * time.Second}
	var c net.Conn
	err := t.clientNS.Do(func(ns.NetNS) error {
		var err error
		c, err = dialer.DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Client returns an HTTP/1.1 client whose connections start in the client
// namespace, keeping up to conns idle connections.
func (t *Topology) Client(conns int) *http.Client {
	return &http.Client{
		Timeout: requestTimeout,
		Transport: &http.Transport{
			DialContext:         t.dial,
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			DisableCompression:  true,
			IdleConnTimeout:     time.Minute,
		},
	}
}

// H2CClient returns an HTTP/2 client with prior knowledge (h2c): every
// request shares one connection, as a gRPC client's would.
func (t *Topology) H2CClient() *http.Client {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: t.dial, Protocols: &p, DisableCompression: true},
	}
}

// GRPCConn is a gRPC client connection to port from the client namespace.
func (t *Topology) GRPCConn(port int) (*grpc.ClientConn, error) {
	return grpc.NewClient(fmt.Sprintf("passthrough:///%s:%d", serverAddr.Addr(), port),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return t.dial(ctx, "tcp", addr) }))
}

// httpReady makes one GET through c and fails unless it answers 200: Run
// proves each path works before it measures any.
func httpReady(ctx context.Context, c *http.Client, url string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
