package proxy

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/orca"

	"github.com/plexus-mesh/plexus/testsupport/fakedestination"
)

// interopEnv makes the test binary run one grpc-go interop test case as
// a client (see TestMain): the case's name, and the server's address.
const (
	interopCaseEnv = "PLEXUS_INTEROP_CASE"
	interopAddrEnv = "PLEXUS_INTEROP_ADDR"
)

// interopCases are grpc-go's interop test cases (interop/client) that run
// without a cloud. Left out: the credentials cases (Google Cloud
// credentials), pick_first_unary (it needs the server ID that only the
// xDS interop server on Traffic Director fills in), and orca_oob (its
// 1 s reporting interval needs a knob internal to grpc-go; its stream is
// a server stream, as server_streaming's).
var interopCases = []string{
	"empty_unary", "large_unary", "client_streaming", "server_streaming", "ping_pong", "empty_stream",
	"timeout_on_sleeping_server", "cancel_after_begin", "cancel_after_first_response",
	"status_code_and_message", "special_status_message", "custom_metadata",
	"unimplemented_method", "unimplemented_service",
	"rpc_soak", "channel_soak", "orca_per_rpc",
}

// orcaServiceConfig is the service config grpc-go's interop runs the
// ORCA cases with: the interop package's balancer that reads the reports.
const orcaServiceConfig = `{"loadBalancingConfig": [{"test_backend_metrics_load_balancer": {}}]}`

// TestMeshGRPCInterop runs grpc-go's own interop test cases from a client
// pod to grpc-go's interop server in a server pod, through both proxies
// over mesh mTLS. Each case runs in its own process, as grpc-go's interop
// client does: a failing case exits non-zero with grpc-go's message.
func TestMeshGRPCInterop(t *testing.T) {
	m, dest := newMTLSMesh(t, nil)
	tgt := fmt.Sprintf("%s:8080", serverIP)
	dest.Set(tgt, fakedestination.Add(fakedestination.Endpoint(tgt, serverPodID)))
	gs := grpc.NewServer(orca.CallMetricsServerOption(nil))
	recorder := orca.NewServerMetricsRecorder()
	testgrpc.RegisterTestServiceServer(gs, interop.NewTestServer(interop.NewTestServerOptions{MetricsRecorder: recorder}))
	orca.Register(gs, orca.ServiceOptions{ServerMetricsProvider: recorder})
	go gs.Serve(m.server.listen(t, ":8080"))
	t.Cleanup(gs.Stop)
	waitFor(t, "server proxy ready", func() bool {
		code, err := m.server.admin("GET", "/ready")
		return err == nil && code == 200
	})
	ran := 0
	for _, c := range interopCases {
		t.Run(c, func(t *testing.T) {
			ran++
			cmd := m.client.ns.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), interopCaseEnv+"="+c, interopAddrEnv+"="+tgt)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%s: %v\n%s", c, err, out)
			}
		})
	}
	in := map[string]string{"direction": "inbound", "target_addr": tgt, "tls": "true", "client_id": clientPodID.String()}
	if got := sumSamples(m.server.scrape(t), "request_total", in); got < float64(ran) {
		t.Errorf("the server proxy counted %v requests over mTLS from the client pod, want ≥ %d: the mesh did not carry the cases", got, ran)
	}
}

// runInteropCase is the client process of one interop case: grpc-go's
// interop/client's cases with its default flags, over plaintext (the
// proxies add mTLS between the pods).
func runInteropCase(name, addr string) int {
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if strings.HasPrefix(name, "orca_") {
		opts = append(opts, grpc.WithDefaultServiceConfig(orcaServiceConfig))
	}
	conn, err := grpc.NewClient(addr, opts...)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer conn.Close()
	tc := testgrpc.NewTestServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	soak := interop.SoakTestConfig{
		RequestSize: 271828, ResponseSize: 314159, PerIterationMaxAcceptableLatency: time.Second,
		OverallTimeout: 10 * time.Second, ServerAddr: addr, NumWorkers: 1, Iterations: 10,
	}
	switch name {
	case "empty_unary":
		interop.DoEmptyUnaryCall(ctx, tc)
	case "large_unary":
		interop.DoLargeUnaryCall(ctx, tc)
	case "client_streaming":
		interop.DoClientStreaming(ctx, tc)
	case "server_streaming":
		interop.DoServerStreaming(ctx, tc)
	case "ping_pong":
		interop.DoPingPong(ctx, tc)
	case "empty_stream":
		interop.DoEmptyStream(ctx, tc)
	case "timeout_on_sleeping_server":
		interop.DoTimeoutOnSleepingServer(ctx, tc)
	case "cancel_after_begin":
		interop.DoCancelAfterBegin(ctx, tc)
	case "cancel_after_first_response":
		interop.DoCancelAfterFirstResponse(ctx, tc)
	case "status_code_and_message":
		interop.DoStatusCodeAndMessage(ctx, tc)
	case "special_status_message":
		interop.DoSpecialStatusMessage(ctx, tc)
	case "custom_metadata":
		interop.DoCustomMetadata(ctx, tc)
	case "unimplemented_method":
		interop.DoUnimplementedMethod(ctx, conn)
	case "unimplemented_service":
		interop.DoUnimplementedService(ctx, testgrpc.NewUnimplementedServiceClient(conn))
	case "rpc_soak":
		soak.ChannelForTest = func() (*grpc.ClientConn, func()) { return conn, func() {} }
		interop.DoSoakTest(ctx, soak)
	case "channel_soak":
		soak.ChannelForTest = func() (*grpc.ClientConn, func()) {
			cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			return cc, func() { cc.Close() }
		}
		interop.DoSoakTest(ctx, soak)
	case "orca_per_rpc":
		interop.DoORCAPerRPCTest(ctx, tc)
	default:
		fmt.Fprintf(os.Stderr, "unknown interop case %q (cases: %s)\n", name, strings.Join(interopCases, ", "))
		return 2
	}
	return 0
}
