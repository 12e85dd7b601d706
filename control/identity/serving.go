package identity

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/plexus-mesh/plexus/mesh/api/identitypb"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
)

// servingRenew is the fraction of its lifetime after which the serving
// certificate is re-issued.
const servingRenew = 0.7

type issuedCert struct {
	tls     *tls.Certificate
	issuer  *loadedIssuer
	renewAt time.Time
}

// servingCertificate returns the service's own certificate for ID(),
// issuing a new one when there is none yet, when the issuer changed, or
// after servingRenew of its lifetime.
func (s *Server) servingCertificate() (*tls.Certificate, error) {
	l := s.issuer.Load()
	if l == nil {
		return nil, s.Ready()
	}
	s.serving.mu.Lock()
	defer s.serving.mu.Unlock()
	now := s.now()
	if c := s.serving.c; c != nil && c.issuer == l && now.Before(c.renewAt) {
		return c.tls, nil
	}
	key, der, err := pki.NewCSR(s.ID())
	if err != nil {
		return nil, err
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("parsing own CSR: %w", err)
	}
	leaf, err := l.issuer.Issue(csr, pki.Leaf{ID: s.ID(), Lifetime: s.cfg.CertLifetime, ClockSkew: s.cfg.ClockSkew, Now: now})
	if err != nil {
		return nil, fmt.Errorf("serving certificate: %w", err)
	}
	cert := &tls.Certificate{Certificate: [][]byte{leaf.Raw}, PrivateKey: key, Leaf: leaf}
	for _, c := range l.issuer.Chain() {
		cert.Certificate = append(cert.Certificate, c.Raw)
	}
	s.serving.c = &issuedCert{tls: cert, issuer: l, renewAt: now.Add(time.Duration(servingRenew * float64(leaf.NotAfter.Sub(now))))}
	s.log.Info("serving certificate issued", "identity", s.ID(), "not_after", leaf.NotAfter)
	return cert, nil
}

// TLSConfig is the service's server TLS: TLS 1.3 only, with its own
// certificate from the current issuer. Clients are not asked for
// certificates: they prove themselves with their token.
func (s *Server) TLSConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return s.servingCertificate()
		},
	}
}

// Serve serves the Identity gRPC API over TLS on ln until ctx ends.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(s.TLSConfig())))
	identitypb.RegisterIdentityServer(gs, s)
	stop := context.AfterFunc(ctx, gs.GracefulStop)
	defer stop()
	if err := gs.Serve(ln); err != nil && ctx.Err() == nil {
		return fmt.Errorf("identity gRPC server on %s: %w", ln.Addr(), err)
	}
	return nil
}
