// Package pki creates the mesh's certificate authorities (a self-signed trust
// anchor and an intermediate issuer), PEM-encodes and decodes their
// certificates and keys, and signs workload leaf certificates that carry
// exactly one SPIFFE ID.
package pki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"math/big"
	"net/url"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// Default lifetimes (ARCHITECTURE.md and the issue 6 PKI contract).
const (
	DefaultAnchorLifetime = 10 * 365 * 24 * time.Hour
	DefaultIssuerLifetime = 365 * 24 * time.Hour
	DefaultLeafLifetime   = 24 * time.Hour
	DefaultClockSkew      = time.Minute
)

// CA is a certificate authority: a CA certificate and its private key.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
}

// CAOptions describe a CA certificate to create.
type CAOptions struct {
	TrustDomain string        // goes into the subject, for people reading the certificate
	Lifetime    time.Duration // 0 means the default for the kind of CA
	Now         time.Time     // zero means time.Now()
	ClockSkew   time.Duration // NotBefore is backdated by this much; 0 means DefaultClockSkew
	// OnlyTrustDomain makes an intermediate that can sign identities of
	// TrustDomain only (URI name constraints: that host, none of its
	// subdomains), so that linked clusters under one anchor cannot mint
	// each other's identities.
	OnlyTrustDomain bool
}

func (o CAOptions) times(def time.Duration) (notBefore, notAfter time.Time, err error) {
	if o.TrustDomain == "" {
		return time.Time{}, time.Time{}, errors.New("CA options: trust domain is empty")
	}
	if o.Lifetime < 0 || o.ClockSkew < 0 {
		return time.Time{}, time.Time{}, fmt.Errorf("CA options: lifetime %s and clock skew %s must not be negative", o.Lifetime, o.ClockSkew)
	}
	now, lifetime, skew := o.Now, o.Lifetime, o.ClockSkew
	if now.IsZero() {
		now = time.Now()
	}
	if lifetime == 0 {
		lifetime = def
	}
	if skew == 0 {
		skew = DefaultClockSkew
	}
	return now.Add(-skew), now.Add(lifetime), nil
}

// NewAnchor creates a self-signed ECDSA P-256 trust anchor.
func NewAnchor(o CAOptions) (CA, error) {
	nb, na, err := o.times(DefaultAnchorLifetime)
	if err != nil {
		return CA{}, err
	}
	return newCA(caTemplate("root.plexus."+o.TrustDomain, nb, na), nil)
}

// NewIntermediate creates an ECDSA P-256 intermediate CA signed by parent (the
// trust anchor). It may sign leaves only (path length 0). Its NotAfter is
// capped at the parent's.
func NewIntermediate(parent CA, o CAOptions) (CA, error) {
	nb, na, err := o.times(DefaultIssuerLifetime)
	if err != nil {
		return CA{}, err
	}
	if parent.Cert == nil || parent.Key == nil || !parent.Cert.IsCA {
		return CA{}, errors.New("intermediate: the parent must be a CA certificate with its key")
	}
	if na.After(parent.Cert.NotAfter) {
		na = parent.Cert.NotAfter
	}
	tmpl := caTemplate("identity.plexus."+o.TrustDomain, nb, na)
	tmpl.MaxPathLenZero = true
	if o.OnlyTrustDomain {
		tmpl.PermittedURIDomains = []string{o.TrustDomain}
		tmpl.ExcludedURIDomains = []string{"." + o.TrustDomain}
	}
	return newCA(tmpl, &parent)
}

// NewAnchorAndIssuer creates a new trust anchor and an issuer signed by it
// for trustDomain only, with the default lifetimes: what an install
// without given identity files starts from.
func NewAnchorAndIssuer(trustDomain string, now time.Time) (anchor, issuer CA, err error) {
	anchor, err = NewAnchor(CAOptions{TrustDomain: trustDomain, Now: now})
	if err != nil {
		return CA{}, CA{}, fmt.Errorf("creating the trust anchor: %w", err)
	}
	issuer, err = NewIntermediate(anchor, CAOptions{TrustDomain: trustDomain, Now: now, OnlyTrustDomain: true})
	if err != nil {
		return CA{}, CA{}, fmt.Errorf("creating the issuer: %w", err)
	}
	return anchor, issuer, nil
}

func caTemplate(cn string, notBefore, notAfter time.Time) *x509.Certificate {
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
}

func newCA(tmpl *x509.Certificate, parent *CA) (CA, error) {
	key, err := NewKey()
	if err != nil {
		return CA{}, err
	}
	if tmpl.SerialNumber, err = serial(); err != nil {
		return CA{}, err
	}
	signerCert, signerKey := tmpl, crypto.Signer(key)
	if parent != nil {
		signerCert, signerKey = parent.Cert, parent.Key
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, signerCert, &key.PublicKey, signerKey)
	if err != nil {
		return CA{}, fmt.Errorf("signing CA certificate %q: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return CA{}, fmt.Errorf("parsing the new CA certificate: %w", err)
	}
	return CA{Cert: cert, Key: key}, nil
}

// NewKey generates an ECDSA P-256 private key.
func NewKey() (*ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generating ECDSA P-256 key: %w", err)
	}
	return key, nil
}

// NewCSR generates an ECDSA P-256 key and a DER certificate signing request
// whose only SAN is id.
func NewCSR(id spiffe.ID) (*ecdsa.PrivateKey, []byte, error) {
	key, err := NewKey()
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{URIs: []*url.URL{id.URL()}}, key)
	if err != nil {
		return nil, nil, fmt.Errorf("creating CSR for %s: %w", id, err)
	}
	return key, der, nil
}

func serial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		return nil, fmt.Errorf("generating serial number: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil // never zero
}
