package destinationcmd

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/plexus-mesh/plexus/mesh/identity/certify"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// IdentityConfig says how the destination server certifies itself with
// the identity service, as a proxy does.
type IdentityConfig struct {
	Addr             string // identity service host:port; empty: plaintext
	TokenFile        string // projected token for identity.plexus.dev
	TrustAnchorsFile string
	Namespace        string // this pod's namespace (also the identity service's)
	ServiceAccount   string
}

func (c *IdentityConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&c.Addr, "identity-addr", "", "identity service host:port; empty serves the API in plaintext")
	fs.StringVar(&c.TokenFile, "identity-token-file", "/var/run/secrets/plexus.dev/identity/token", "service-account token for identity.plexus.dev")
	fs.StringVar(&c.TrustAnchorsFile, "trust-anchors-file", "", "PEM trust anchors")
	fs.StringVar(&c.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "this pod's namespace (default $POD_NAMESPACE)")
	fs.StringVar(&c.ServiceAccount, "service-account", "plexus-destination", "this pod's service account")
}

// Validate checks the settings needed when Addr is set.
func (c IdentityConfig) Validate() error {
	if c.Addr == "" {
		return nil
	}
	if c.TrustAnchorsFile == "" || c.Namespace == "" || c.ServiceAccount == "" || c.TokenFile == "" {
		return errors.New("--identity-addr needs --trust-anchors-file, --identity-token-file, --namespace and --service-account")
	}
	return nil
}

// client is the certify client for spiffe://<td>/ns/<ns>/sa/<sa>.
func (c IdentityConfig) client(trustDomain string, log *slog.Logger) (*certify.Client, error) {
	pem, err := os.ReadFile(c.TrustAnchorsFile)
	if err != nil {
		return nil, fmt.Errorf("reading trust anchors: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("trust anchors %s hold no PEM certificate", c.TrustAnchorsFile)
	}
	return certify.New(certify.Config{
		Addr:         c.Addr,
		ServerID:     spiffe.New(trustDomain, c.Namespace, "plexus-identity"),
		ID:           spiffe.New(trustDomain, c.Namespace, c.ServiceAccount),
		TokenFile:    c.TokenFile,
		TrustAnchors: roots,
		Log:          log,
	})
}

// serverTLS serves the current certificate over TLS 1.3 and verifies the
// client certificates proxies present against the anchors. A caller may
// connect without one: the stream interceptor (grpcServer) then refuses
// its streams unless it is on loopback (a port-forward into this pod).
func serverTLS(certs *certify.Client) *tls.Config {
	return &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return certs.Certificate() },
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      certs.Roots(),
	}
}
