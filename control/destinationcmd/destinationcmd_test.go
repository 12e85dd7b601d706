package destinationcmd

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

func TestParseFlags(t *testing.T) {
	cfg, err := ParseFlags([]string{"--cluster-domain", "example.org", "--queue-size", "7", "--trust-domain", "td.example"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != ":8086" || cfg.AdminAddr != ":9996" || cfg.Destination.ClusterDomain != "example.org" ||
		cfg.Destination.QueueSize != 7 || cfg.Destination.TrustDomain != "td.example" || cfg.Kubeconfig != "" {
		t.Errorf("parsed %+v", cfg)
	}
	if d := cfg.Destination; d.MaxStreamsPerIdentity != 2000 || d.MaxLoopbackStreams != 100 || !d.RequireCallerIdentity {
		t.Errorf("caller defaults: %+v", d)
	}
	if d := cfg.Destination; d.DefaultInboundPolicy != "all-unauthenticated" || !d.VerifyInboundCaller ||
		prefixList(d.ClusterNetworks) != "10.0.0.0/8,100.64.0.0/10,172.16.0.0/12,192.168.0.0/16,fd00::/8" {
		t.Errorf("inbound defaults: %+v", d)
	}
	cfg, err = ParseFlags([]string{"--default-inbound-policy", "cluster-authenticated", "--cluster-networks", "10.244.0.0/16, fd10::/64"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Destination; d.DefaultInboundPolicy != "cluster-authenticated" || prefixList(d.ClusterNetworks) != "10.244.0.0/16,fd10::/64" {
		t.Errorf("inbound flags: %+v", d)
	}
	cfg, err = ParseFlags([]string{"--max-streams-per-identity", "500", "--max-loopback-streams", "5"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if d := cfg.Destination; d.MaxStreamsPerIdentity != 500 || d.MaxLoopbackStreams != 5 {
		t.Errorf("caller flags: %+v", d)
	}
	for _, args := range [][]string{
		{"--max-streams-per-identity", "0"},
		{"--max-loopback-streams", "0"},
		{"--default-inbound-policy", "allow"},
		{"--cluster-networks", ""},
		{"--cluster-networks", "10.0.0.1/8"},
		{"--cluster-networks", "10.0.0.0/8,nowhere"},
		{"--queue-size", "0"},
		{"--addr", "8086"},
		{"--cluster-domain", ".cluster.local"},
		{"--trust-domain", ""},
		{"extra"},
		{"--no-such-flag"},
	} {
		if _, err := ParseFlags(args, io.Discard); err == nil {
			t.Errorf("ParseFlags(%q) accepted", args)
		}
	}
}

// logWatch records whether a log line containing want was written (slog
// writes each record in one Write).
type logWatch struct {
	want string
	seen atomic.Bool
}

func (l *logWatch) Write(p []byte) (int, error) {
	if bytes.Contains(p, []byte(l.want)) {
		l.seen.Store(true)
	}
	return len(p), nil
}

func freeAddr(t *testing.T) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// TestMainAgainstCluster runs the subcommand against the local cluster:
// it becomes ready once its informers sync, answers Get, exports metrics,
// warns that it serves plaintext, and returns when its context ends.
func TestMainAgainstCluster(t *testing.T) {
	c := clustertest.Connect(t)
	addr, admin := freeAddr(t), freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out := &logWatch{want: "PLAINTEXT"}
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, []string{"--addr", addr, "--admin-addr", admin, "--kubeconfig", c.Kubeconfig}, out)
	}()

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + admin + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	clustertest.WaitFor(t, 30*time.Second, "/ready answering 200", func(context.Context) (bool, error) {
		code, _ := get("/ready")
		return code == http.StatusOK, nil
	})
	if code, _ := get("/live"); code != http.StatusOK {
		t.Errorf("/live = %d", code)
	}

	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	stream, err := pb.NewDestinationClient(conn).Get(ctx, &pb.GetDestination{Path: "no-such-service.default.svc.cluster.local:80"})
	if err != nil {
		t.Fatal(err)
	}
	u, err := stream.Recv()
	if err != nil || u.GetNoEndpoints() == nil || u.GetNoEndpoints().Exists {
		t.Fatalf("Get of an unknown service = %v, %v; want NoEndpoints{exists:false}", u, err)
	}
	if code, body := get("/metrics"); code != http.StatusOK || !strings.Contains(body, `plexus_destination_streams{rpc="get"} 1`) {
		t.Errorf("/metrics = %d without the open stream:\n%s", code, body)
	}
	if !out.seen.Load() {
		t.Error("no warning that the server speaks PLAINTEXT in the log")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Main after cancel = %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("Main did not return within 15s of its context ending")
	}
}
