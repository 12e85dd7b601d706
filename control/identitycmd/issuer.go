package identitycmd

import (
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// Names of what IssuerMain renders.
const (
	AnchorsConfigMap = "plexus-identity-trust-anchors"
	AnchorsBundleKey = "ca-bundle.crt"
)

// IssuerMain runs `plexus-control issuer`: it creates a trust anchor (or
// reads one, for rotation) and an issuer signed by it, and prints YAML for
// the issuer Secret and the trust-anchor ConfigMap. Nothing is read from or
// written to a cluster.
func IssuerMain(_ context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("issuer", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var (
		td             = fs.String("trust-domain", spiffe.DefaultTrustDomain, "trust domain")
		namespace      = fs.String("namespace", "plexus-system", "namespace of the Secret and the ConfigMap")
		issuerLifetime = fs.Duration("issuer-lifetime", pki.DefaultIssuerLifetime, "lifetime of the issuer certificate")
		anchorLifetime = fs.Duration("anchor-lifetime", pki.DefaultAnchorLifetime, "lifetime of a new trust anchor")
		anchorCert     = fs.String("anchor-cert", "", "PEM file of an existing trust anchor (first certificate; any further ones are kept as anchors too), for rotating the issuer")
		anchorKey      = fs.String("anchor-key", "", "PEM file of the existing trust anchor's key")
		anchorOut      = fs.String("anchor-out", "", "directory to write a new anchor to (ca.crt, ca.key), so that the issuer can later be rotated")
	)
	if err := component.ParseFlags(fs, args, nil); err != nil {
		return fmt.Errorf("issuer: %w", err)
	}
	if (*anchorCert == "") != (*anchorKey == "") {
		return errors.New("issuer: --anchor-cert and --anchor-key go together")
	}
	if *anchorCert != "" && *anchorOut != "" {
		return errors.New("issuer: --anchor-out is for a new anchor, not with --anchor-cert")
	}
	var (
		anchor  pki.CA
		anchors []*x509.Certificate
		err     error
	)
	if *anchorCert != "" {
		anchor, anchors, err = readAnchor(*anchorCert, *anchorKey)
	} else {
		anchor, err = pki.NewAnchor(pki.CAOptions{TrustDomain: *td, Lifetime: *anchorLifetime})
		anchors = []*x509.Certificate{anchor.Cert}
		if err == nil && *anchorOut != "" {
			err = writeAnchor(*anchorOut, anchor)
		}
	}
	if err != nil {
		return fmt.Errorf("issuer: %w", err)
	}
	issuer, err := pki.NewIntermediate(anchor, pki.CAOptions{TrustDomain: *td, Lifetime: *issuerLifetime, OnlyTrustDomain: true})
	if err != nil {
		return fmt.Errorf("issuer: %w", err)
	}
	secret, err := identity.IssuerSecret(*namespace, identity.DefaultSecretName, anchors, issuer)
	if err != nil {
		return fmt.Errorf("issuer: %w", err)
	}
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: *namespace, Name: AnchorsConfigMap},
		Data:       map[string]string{AnchorsBundleKey: string(pki.EncodeCerts(anchors...))},
	}
	for i, obj := range []any{secret, cm} {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return fmt.Errorf("issuer: %w", err)
		}
		if i > 0 {
			io.WriteString(stdout, "---\n")
		}
		if _, err := stdout.Write(b); err != nil {
			return fmt.Errorf("issuer: %w", err)
		}
	}
	return nil
}

func readAnchor(certFile, keyFile string) (pki.CA, []*x509.Certificate, error) {
	certPEM, err := os.ReadFile(certFile)
	if err != nil {
		return pki.CA{}, nil, err
	}
	certs, err := pki.ParseCerts(certPEM)
	if err != nil {
		return pki.CA{}, nil, fmt.Errorf("%s: %w", certFile, err)
	}
	keyPEM, err := os.ReadFile(keyFile)
	if err != nil {
		return pki.CA{}, nil, err
	}
	key, err := pki.ParseKey(keyPEM)
	if err != nil {
		return pki.CA{}, nil, fmt.Errorf("%s: %w", keyFile, err)
	}
	if !key.PublicKey.Equal(certs[0].PublicKey) {
		return pki.CA{}, nil, fmt.Errorf("the key in %s is not the key of the first certificate in %s", keyFile, certFile)
	}
	if !certs[0].IsCA {
		return pki.CA{}, nil, fmt.Errorf("the first certificate in %s is not a CA", certFile)
	}
	return pki.CA{Cert: certs[0], Key: key}, certs, nil
}

func writeAnchor(dir string, anchor pki.CA) error {
	key, err := pki.EncodeKey(anchor.Key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "ca.crt"), pki.EncodeCerts(anchor.Cert), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "ca.key"), key, 0o600)
}
