// Package destinationtest runs a real destination server
// (control/destination on fake API clients) as plexus-control destination
// serves it: TLS 1.3 with its mesh certificate, client certificates
// verified if given, and the server's caller interceptor. It is for tests
// of destination's clients (plexusctl diagnostics endpoints, say).
package destinationtest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/control/destination"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// ControlNamespace and ServiceAccount name destination's identity as
// plexusctl install deploys it.
const (
	ControlNamespace = "plexus-system"
	ServiceAccount   = "plexus-destination"
)

// PKI is a mesh's trust anchor and issuer (mesh/identity/pki, as identity runs
// them).
type PKI struct {
	TrustDomain string
	Anchor      pki.CA
	Roots       *x509.CertPool
	issuer      *pki.Issuer
}

// NewPKI creates a trust anchor and an issuer for trustDomain.
func NewPKI(t testing.TB, trustDomain string) *PKI {
	t.Helper()
	anchor, err := pki.NewAnchor(pki.CAOptions{TrustDomain: trustDomain})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(anchor.Cert)
	issuer, err := pki.NewIssuer([]*x509.Certificate{anchor.Cert}, anchor.Key, roots, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	return &PKI{TrustDomain: trustDomain, Anchor: anchor, Roots: roots, issuer: issuer}
}

// AnchorsPEM is the trust anchor as the ConfigMap
// plexus-identity-trust-anchors holds it.
func (p *PKI) AnchorsPEM() []byte { return pki.EncodeCerts(p.Anchor.Cert) }

// Leaf is a workload certificate for id, as identity issues it.
func (p *PKI) Leaf(t testing.TB, id spiffe.ID) tls.Certificate {
	t.Helper()
	key, der, err := pki.NewCSR(id)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := p.issuer.Issue(csr, pki.Leaf{ID: id, Lifetime: time.Hour, ClockSkew: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{cert.Raw}, PrivateKey: key, Leaf: cert}
}

// ID is destination's identity in this mesh.
func (p *PKI) ID() spiffe.ID { return spiffe.New(p.TrustDomain, ControlNamespace, ServiceAccount) }

// ServerTLS is destination's TLS configuration
// (control/destinationcmd's): its certificate, TLS 1.3, client
// certificates verified against the anchors if given.
func (p *PKI) ServerTLS(t testing.TB) *tls.Config {
	cert := p.Leaf(t, p.ID())
	return &tls.Config{MinVersion: tls.VersionTLS13, Certificates: []tls.Certificate{cert}, ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: p.Roots}
}

// Server is a running destination server.
type Server struct {
	// Addr is its gRPC address on 127.0.0.1 (callers from there are on
	// loopback, as through a port-forward).
	Addr     string
	PKI      *PKI
	Registry *prometheus.Registry
	Server   *destination.Server
}

// Start runs a destination server of trustDomain's mesh on a fake cluster
// holding objs (Services, EndpointSlices, Pods) until the test ends.
// cfg, when not nil, adjusts its configuration.
func Start(t testing.TB, trustDomain string, cfg func(*destination.Config), objs ...runtime.Object) *Server {
	t.Helper()
	c := destination.DefaultConfig()
	c.TrustDomain = trustDomain
	if cfg != nil {
		cfg(&c)
	}
	reg := prometheus.NewRegistry()
	srv, err := destination.New(c, fake.NewClientset(objs...), reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("destination Run: %v", err)
		}
	})
	for deadline := time.Now().Add(30 * time.Second); srv.Ready() != nil; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("destination not ready within 30s")
		}
	}
	p := NewPKI(t, trustDomain)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(p.ServerTLS(t))), grpc.ChainStreamInterceptor(srv.StreamInterceptor()))
	pb.RegisterDestinationServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return &Server{Addr: lis.Addr().String(), PKI: p, Registry: reg, Server: srv}
}
