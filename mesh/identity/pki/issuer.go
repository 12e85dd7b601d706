package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// Issuer signs workload leaf certificates. It is immutable and safe for
// concurrent use.
type Issuer struct {
	key   *ecdsa.PrivateKey
	chain []*x509.Certificate // the issuer certificate first, then any further intermediates
}

// NewIssuer checks that chain[0] is a CA certificate whose key is key and
// that chain verifies to anchors at now, and returns an Issuer.
func NewIssuer(chain []*x509.Certificate, key *ecdsa.PrivateKey, anchors *x509.CertPool, now time.Time) (*Issuer, error) {
	if len(chain) == 0 || key == nil || anchors == nil {
		return nil, errors.New("issuer: need a certificate, its key and the trust anchors")
	}
	c := chain[0]
	if !c.IsCA || c.KeyUsage&x509.KeyUsageCertSign == 0 {
		return nil, fmt.Errorf("issuer certificate %q is not a CA allowed to sign certificates", c.Subject.CommonName)
	}
	if !key.PublicKey.Equal(c.PublicKey) {
		return nil, fmt.Errorf("issuer key does not belong to certificate %q", c.Subject.CommonName)
	}
	inter := x509.NewCertPool()
	for _, ic := range chain[1:] {
		inter.AddCert(ic)
	}
	if _, err := c.Verify(x509.VerifyOptions{Roots: anchors, Intermediates: inter, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err != nil {
		return nil, fmt.Errorf("issuer certificate %q does not verify to the trust anchors: %w", c.Subject.CommonName, err)
	}
	return &Issuer{key: key, chain: chain}, nil
}

// ParseIssuer is NewIssuer for PEM text: certPEM holds the issuer
// certificate first, then any further intermediates; keyPEM its key.
func ParseIssuer(certPEM, keyPEM []byte, anchors *x509.CertPool, now time.Time) (*Issuer, error) {
	chain, err := ParseCerts(certPEM)
	if err != nil {
		return nil, fmt.Errorf("issuer certificate: %w", err)
	}
	key, err := ParseKey(keyPEM)
	if err != nil {
		return nil, fmt.Errorf("issuer key: %w", err)
	}
	return NewIssuer(chain, key, anchors, now)
}

// Certificate returns the issuer's own certificate.
func (i *Issuer) Certificate() *x509.Certificate { return i.chain[0] }

// Chain returns the certificates a leaf's holder presents after the leaf:
// the issuer first, up to (not including) the trust anchor.
func (i *Issuer) Chain() []*x509.Certificate { return i.chain }

// Leaf describes a leaf certificate to issue.
type Leaf struct {
	ID        spiffe.ID     // the only SAN
	Lifetime  time.Duration // from Now; must be positive
	ClockSkew time.Duration // NotBefore = Now - ClockSkew
	Now       time.Time     // zero means time.Now()
}

// Issue signs a leaf for the public key of csr, which must be a validly
// signed ECDSA P-256 request. Only the key is taken from the request: the
// certificate names exactly leaf.ID as its one URI SAN, has KeyUsage
// DigitalSignature and ExtKeyUsage ServerAuth and ClientAuth. Its NotAfter
// is capped at the issuer's.
func (i *Issuer) Issue(csr *x509.CertificateRequest, leaf Leaf) (*x509.Certificate, error) {
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("CSR signature: %w", err)
	}
	pub, ok := csr.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		return nil, fmt.Errorf("CSR key is %T, want ECDSA P-256", csr.PublicKey)
	}
	if leaf.ID.IsZero() || leaf.Lifetime <= 0 || leaf.ClockSkew < 0 {
		return nil, fmt.Errorf("leaf for %q: need an identity, a positive lifetime (%s) and a non-negative clock skew (%s)", leaf.ID, leaf.Lifetime, leaf.ClockSkew)
	}
	if err := CheckTrustDomain(i.chain, leaf.ID.TrustDomain); err != nil {
		return nil, fmt.Errorf("leaf for %s: %w", leaf.ID, err)
	}
	now := leaf.Now
	if now.IsZero() {
		now = time.Now()
	}
	notAfter := now.Add(leaf.Lifetime)
	if ia := i.chain[0].NotAfter; notAfter.After(ia) {
		notAfter = ia
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		NotBefore:             now.Add(-leaf.ClockSkew),
		NotAfter:              notAfter,
		URIs:                  []*url.URL{leaf.ID.URL()},
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, i.chain[0], pub, i.key)
	if err != nil {
		return nil, fmt.Errorf("signing leaf for %s: %w", leaf.ID, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("parsing the new leaf for %s: %w", leaf.ID, err)
	}
	return cert, nil
}
