// Package testpki generates, for tests only, a PKI shaped like the mesh's
// (ARCHITECTURE.md §2): a self-signed ECDSA P-256 trust anchor, an issuer CA
// signed by it, and leaves with exactly one SPIFFE URI SAN.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// CA is a trust anchor and the issuer it signed.
type CA struct {
	Anchor    *x509.Certificate
	anchorKey *ecdsa.PrivateKey
	Issuer    *x509.Certificate
	issuerKey *ecdsa.PrivateKey
	serial    atomic.Int64
}

// New creates a trust anchor and an issuer; it panics on failure (tests).
func New(name string) *CA {
	ca := &CA{}
	ca.serial.Store(1)
	ca.anchorKey = key()
	ca.Anchor = ca.sign(caTemplate(name+" trust anchor"), nil, nil, &ca.anchorKey.PublicKey)
	ca.issuerKey = key()
	issuer := caTemplate(name + " issuer")
	issuer.MaxPathLenZero = true
	ca.Issuer = ca.sign(issuer, ca.Anchor, ca.anchorKey, &ca.issuerKey.PublicKey)
	return ca
}

func caTemplate(cn string) *x509.Certificate {
	now := time.Now()
	return &x509.Certificate{
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
}

// AnchorPEM is the trust anchor in PEM form.
func (ca *CA) AnchorPEM() []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Anchor.Raw})
}

// Roots is a pool holding the trust anchor.
func (ca *CA) Roots() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Anchor)
	return p
}

// Leaf issues a 24 h leaf for id (URI SAN only, server and client auth),
// backdated a minute, and returns it with the issuer as its chain.
func (ca *CA) Leaf(id spiffe.ID) *tls.Certificate {
	return ca.LeafWith(id, func(*x509.Certificate) {})
}

// LeafWith is Leaf with the template adjusted by mut before signing.
func (ca *CA) LeafWith(id spiffe.ID, mut func(*x509.Certificate)) *tls.Certificate {
	k := key()
	now := time.Now()
	tmpl := &x509.Certificate{
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    now.Add(24 * time.Hour),
		URIs:        []*url.URL{id.URL()},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	mut(tmpl)
	leaf := ca.sign(tmpl, ca.Issuer, ca.issuerKey, &k.PublicKey)
	return &tls.Certificate{Certificate: [][]byte{leaf.Raw, ca.Issuer.Raw}, PrivateKey: k, Leaf: leaf}
}

// PEM returns a certificate's chain and its key in PEM form.
func PEM(c *tls.Certificate) (chain, keyPEM []byte) {
	for _, der := range c.Certificate {
		chain = append(chain, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	der, err := x509.MarshalPKCS8PrivateKey(c.PrivateKey)
	if err != nil {
		panic(err)
	}
	return chain, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}

// Source is a fixed certificate source (the shape of certify.Client's
// ID/Roots/Certificate methods).
type Source struct {
	Identity spiffe.ID
	Pool     *x509.CertPool
	Cert     *tls.Certificate
}

// Source returns a Source for id with a fresh leaf.
func (ca *CA) Source(id spiffe.ID) *Source {
	return &Source{Identity: id, Pool: ca.Roots(), Cert: ca.Leaf(id)}
}

// ID returns the source's identity.
func (s *Source) ID() spiffe.ID { return s.Identity }

// Roots returns the trust anchors.
func (s *Source) Roots() *x509.CertPool { return s.Pool }

// Certificate returns the leaf and issuer with the key.
func (s *Source) Certificate() (*tls.Certificate, error) { return s.Cert, nil }

func (ca *CA) sign(tmpl, parent *x509.Certificate, parentKey *ecdsa.PrivateKey, pub *ecdsa.PublicKey) *x509.Certificate {
	tmpl.SerialNumber = big.NewInt(ca.serial.Add(1))
	if parent == nil {
		parent, parentKey = tmpl, ca.anchorKey
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, parentKey)
	if err != nil {
		panic(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		panic(err)
	}
	return c
}

func key() *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	return k
}
