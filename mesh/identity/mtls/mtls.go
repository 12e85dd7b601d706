// Package mtls builds the TLS configurations of the mesh: proxy-to-proxy
// mutual TLS (TLS 1.3, ALPN plexus.mtls.v1, SPIFFE identities verified
// against the trust anchors) and the proxy's TLS to the control plane, and
// recognises an inbound ClientHello that offers the mesh's ALPN.
package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// ALPN is the protocol a proxy offers when it originates mesh mTLS.
const ALPN = "plexus.mtls.v1"

// CertSource provides the workload's identity and its current certificate
// (mesh/identity/certify.Client implements it).
type CertSource interface {
	ID() spiffe.ID
	Roots() *x509.CertPool
	Certificate() (*tls.Certificate, error)
}

// certificatePoll is how often WaitForCertificate asks src again.
const certificatePoll = 20 * time.Millisecond

// WaitForCertificate returns once src holds a valid certificate, or ctx's
// error (with src's reason) when ctx ends first. A client that dials
// before its first certificate can only fail the handshake, and gRPC then
// backs off (a second, growing) before it tries again: waiting at the
// dial instead starts its streams as soon as the certificate is issued.
func WaitForCertificate(ctx context.Context, src CertSource) error {
	_, err := src.Certificate()
	if err == nil {
		return nil
	}
	t := time.NewTicker(certificatePoll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", context.Cause(ctx), err)
		case <-t.C:
			if _, err = src.Certificate(); err == nil {
				return nil
			}
		}
	}
}

// ClientConfig returns a TLS 1.3 client configuration that presents src's
// certificate and accepts only a server whose chain verifies to src's
// trust anchors and whose leaf names exactly want. alpn is offered as is
// (nil for gRPC, which adds h2 itself).
func ClientConfig(src CertSource, want spiffe.ID, alpn ...string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: alpn,
		// The SAN is a URI, not a host name: the standard verification is
		// replaced by VerifyConnection below, never skipped.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return src.Certificate()
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			chains, err := VerifyChain(cs.PeerCertificates, src.Roots(), x509.ExtKeyUsageServerAuth)
			if err != nil {
				return fmt.Errorf("server certificate: %w", err)
			}
			_, err = spiffe.VerifyPeer(chains, want)
			return err
		},
	}
}

// ServerConfig returns the inbound mesh configuration: TLS 1.3, ALPN
// plexus.mtls.v1 only, a client certificate required and verified to the
// trust anchors (ClientID of the handshaken connection names it).
func ServerConfig(src CertSource) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		NextProtos: []string{ALPN},
		ClientAuth: tls.RequireAnyClientCert, // verified in VerifyConnection against the current roots
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return src.Certificate()
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			if cs.NegotiatedProtocol != ALPN {
				return fmt.Errorf("client did not negotiate %s", ALPN)
			}
			chains, err := VerifyChain(cs.PeerCertificates, src.Roots(), x509.ExtKeyUsageClientAuth)
			if err != nil {
				return fmt.Errorf("client certificate: %w", err)
			}
			_, err = spiffe.FromCert(chains[0][0])
			return err
		},
	}
}

// VerifyChain verifies a peer's leaf with the rest of what it presented
// as intermediates, to roots, for usage.
func VerifyChain(certs []*x509.Certificate, roots *x509.CertPool, usage x509.ExtKeyUsage) ([][]*x509.Certificate, error) {
	if len(certs) == 0 {
		return nil, errors.New("no certificate presented")
	}
	inter := x509.NewCertPool()
	for _, c := range certs[1:] {
		inter.AddCert(c)
	}
	return certs[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{usage}})
}

// PeerID is the identity in a completed handshake's verified peer leaf.
func PeerID(cs tls.ConnectionState) (spiffe.ID, error) {
	if len(cs.PeerCertificates) == 0 {
		return spiffe.ID{}, errors.New("peer presented no certificate")
	}
	return spiffe.FromCert(cs.PeerCertificates[0])
}

// Client runs the client handshake of mesh mTLS on c toward a proxy that
// must prove want; on failure c is closed.
func Client(ctx context.Context, c net.Conn, src CertSource, want spiffe.ID) (*tls.Conn, error) {
	tc := tls.Client(c, ClientConfig(src, want, ALPN))
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("mtls handshake with %s (%s): %w", c.RemoteAddr(), want, err)
	}
	if p := tc.ConnectionState().NegotiatedProtocol; p != ALPN {
		tc.Close()
		return nil, fmt.Errorf("mtls handshake with %s: server negotiated %q, want %s", c.RemoteAddr(), p, ALPN)
	}
	return tc, nil
}

// Server runs the server handshake on c (whose first bytes were peeked
// and are replayed) and returns the connection and the client's identity;
// on failure c is closed.
func Server(ctx context.Context, c net.Conn, cfg *tls.Config) (*tls.Conn, spiffe.ID, error) {
	tc := tls.Server(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, spiffe.ID{}, fmt.Errorf("mtls handshake from %s: %w", c.RemoteAddr(), err)
	}
	id, err := PeerID(tc.ConnectionState())
	if err != nil {
		tc.Close()
		return nil, spiffe.ID{}, fmt.Errorf("mtls handshake from %s: %w", c.RemoteAddr(), err)
	}
	return tc, id, nil
}
