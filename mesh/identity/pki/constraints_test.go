package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// TestOnlyTrustDomain: an issuer made for one trust domain signs its
// identities, which verify to the anchor; it refuses to sign another
// trust domain's, or a subdomain's, and a leaf of another domain forged
// under it (signed directly) fails Go's verification, which is what the
// proxies run.
func TestOnlyTrustDomain(t *testing.T) {
	anchor, err := NewAnchor(CAOptions{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := NewIntermediate(anchor, CAOptions{TrustDomain: "b.cluster.local", OnlyTrustDomain: true})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(anchor.Cert)
	iss, err := NewIssuer([]*x509.Certificate{issuer.Cert}, issuer.Key, roots, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	verify := func(leaf *x509.Certificate) error {
		inter := x509.NewCertPool()
		inter.AddCert(issuer.Cert)
		_, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
		return err
	}
	own, err := iss.Issue(csr, Leaf{ID: spiffe.New("b.cluster.local", "ns", "client"), Lifetime: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(own); err != nil {
		t.Errorf("its own trust domain's identity: %v", err)
	}
	for _, td := range []string{"cluster.local", "x.b.cluster.local", "a.cluster.local"} {
		if _, err := iss.Issue(csr, Leaf{ID: spiffe.New(td, "ns", "client"), Lifetime: time.Hour}); err == nil || !strings.Contains(err.Error(), "not of "+td) {
			t.Errorf("issued for %s: %v", td, err)
		}
		// Forged past Issue's check: Go's verification refuses it.
		forgedTmpl := &x509.Certificate{SerialNumber: own.SerialNumber, NotBefore: own.NotBefore, NotAfter: own.NotAfter,
			URIs: []*url.URL{spiffe.New(td, "ns", "client").URL()}, ExtKeyUsage: own.ExtKeyUsage, KeyUsage: own.KeyUsage}
		der, err := x509.CreateCertificate(rand.Reader, forgedTmpl, issuer.Cert, &key.PublicKey, issuer.Key)
		if err != nil {
			t.Fatal(err)
		}
		leaf, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		if err := verify(leaf); err == nil {
			t.Errorf("a leaf of %s under the issuer for b.cluster.local verified", td)
		}
	}
}
