package destinationcmd

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/control/destination"
	"github.com/plexus-mesh/plexus/control/destination/destinationtest"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// fromAddr is a listener whose connections come from addr.
type fromAddr struct {
	net.Listener
	addr net.Addr
}

func (l fromAddr) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return remoteAddrConn{c, l.addr}, nil
}

type remoteAddrConn struct {
	net.Conn
	addr net.Addr
}

func (c remoteAddrConn) RemoteAddr() net.Addr { return c.addr }

// TestGRPCServerCallers: the server Run builds, over the TLS serverTLS
// gives it (real TLS, a mesh/identity/pki mesh), refuses a caller on the pod
// network without a client certificate, answers a proxy's identity and,
// without a certificate, a caller on loopback.
func TestGRPCServerCallers(t *testing.T) {
	mesh := destinationtest.NewPKI(t, "cluster.local")
	srv, err := destination.New(destination.DefaultConfig(), fake.NewClientset(&corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web"},
		Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}), prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	eventually.Within(t, 30*time.Second, "the destination server ready", func() bool { return srv.Ready() == nil })
	serve := func(from net.Addr) string {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		gs := grpcServer(srv, mesh.ServerTLS(t))
		var l net.Listener = lis
		if from != nil {
			l = fromAddr{lis, from}
		}
		go func() { _ = gs.Serve(l) }()
		t.Cleanup(gs.Stop)
		return lis.Addr().String()
	}
	podNetwork := serve(&net.TCPAddr{IP: net.ParseIP("10.244.0.7"), Port: 40000})
	loopback := serve(nil)
	web := mesh.Leaf(t, spiffe.New("cluster.local", "shop", "web"))
	get := func(addr string, cert *tls.Certificate) error {
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: mesh.Roots, InsecureSkipVerify: true}
		if cert != nil {
			cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		st, err := pb.NewDestinationClient(conn).Get(ctx, &pb.GetDestination{Path: "web.shop.svc.cluster.local:80"})
		if err == nil {
			_, err = st.Recv()
		}
		return err
	}
	if err := get(podNetwork, nil); status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), "presented none") {
		t.Errorf("pod network, no certificate: %v, want Unauthenticated", err)
	}
	if err := get(podNetwork, &web); err != nil {
		t.Errorf("pod network, a proxy's certificate: %v", err)
	}
	if err := get(loopback, nil); err != nil {
		t.Errorf("loopback, no certificate: %v", err)
	}
}
