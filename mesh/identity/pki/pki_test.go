package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/base64"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

func newPKI(t *testing.T) (anchor, inter CA, iss *Issuer, roots *x509.CertPool) {
	t.Helper()
	anchor, err := NewAnchor(CAOptions{TrustDomain: "cluster.local", Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	inter, err = NewIntermediate(anchor, CAOptions{TrustDomain: "cluster.local", Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	roots = x509.NewCertPool()
	roots.AddCert(anchor.Cert)
	iss, err = NewIssuer([]*x509.Certificate{inter.Cert}, inter.Key, roots, t0)
	if err != nil {
		t.Fatal(err)
	}
	return anchor, inter, iss, roots
}

func csrFor(t *testing.T, uris ...string) *x509.CertificateRequest {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{}
	for _, u := range uris {
		pu, _ := url.Parse(u)
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		t.Fatal(err)
	}
	return csr
}

func TestCALifetimesAndConstraints(t *testing.T) {
	anchor, inter, _, _ := newPKI(t)
	if got := anchor.Cert.NotAfter.Sub(t0); got != DefaultAnchorLifetime {
		t.Errorf("anchor lifetime %s, want %s", got, DefaultAnchorLifetime)
	}
	if got := inter.Cert.NotAfter.Sub(t0); got != DefaultIssuerLifetime {
		t.Errorf("issuer lifetime %s, want %s", got, DefaultIssuerLifetime)
	}
	if !anchor.Cert.IsCA || !inter.Cert.IsCA || !inter.Cert.MaxPathLenZero || inter.Cert.MaxPathLen != 0 {
		t.Errorf("CA flags: anchor IsCA %v, issuer IsCA %v pathlen %d zero %v", anchor.Cert.IsCA, inter.Cert.IsCA, inter.Cert.MaxPathLen, inter.Cert.MaxPathLenZero)
	}
	if _, ok := anchor.Cert.PublicKey.(*ecdsa.PublicKey); !ok || anchor.Cert.SignatureAlgorithm != x509.ECDSAWithSHA256 {
		t.Errorf("anchor key %T, signature %s", anchor.Cert.PublicKey, anchor.Cert.SignatureAlgorithm)
	}
	short, err := NewAnchor(CAOptions{TrustDomain: "td", Lifetime: time.Hour, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	capped, err := NewIntermediate(short, CAOptions{TrustDomain: "td", Lifetime: 5 * time.Hour, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if !capped.Cert.NotAfter.Equal(short.Cert.NotAfter) {
		t.Errorf("issuer outlives its anchor: %s > %s", capped.Cert.NotAfter, short.Cert.NotAfter)
	}
}

func TestIssueLeafExactlyPerContract(t *testing.T) {
	anchor, inter, iss, roots := newPKI(t)
	id := spiffe.New("cluster.local", "emojivoto", "web")
	leaf, err := iss.Issue(csrFor(t, id.String()), Leaf{ID: id, Lifetime: 24 * time.Hour, ClockSkew: time.Minute, Now: t0.Add(time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	inters := x509.NewCertPool()
	for _, c := range iss.Chain() {
		inters.AddCert(c)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, CurrentTime: t0.Add(2 * time.Hour), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatalf("leaf does not verify to the anchor: %v", err)
	}
	if got := chains[0]; len(got) != 3 || !got[1].Equal(inter.Cert) || !got[2].Equal(anchor.Cert) {
		t.Fatalf("chain %v, want leaf, issuer, anchor", got)
	}
	if got, err := spiffe.VerifyPeer(chains, id); err != nil || got != id {
		t.Fatalf("VerifyPeer = %v, %v", got, err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id.String() || len(leaf.DNSNames)+len(leaf.IPAddresses)+len(leaf.EmailAddresses) != 0 {
		t.Errorf("SANs: URIs %v DNS %v IP %v email %v", leaf.URIs, leaf.DNSNames, leaf.IPAddresses, leaf.EmailAddresses)
	}
	if leaf.KeyUsage != x509.KeyUsageDigitalSignature {
		t.Errorf("KeyUsage %v, want DigitalSignature only", leaf.KeyUsage)
	}
	if len(leaf.ExtKeyUsage) != 2 || leaf.ExtKeyUsage[0] != x509.ExtKeyUsageServerAuth || leaf.ExtKeyUsage[1] != x509.ExtKeyUsageClientAuth {
		t.Errorf("ExtKeyUsage %v, want ServerAuth, ClientAuth", leaf.ExtKeyUsage)
	}
	if leaf.IsCA {
		t.Error("leaf is a CA")
	}
	if pub, ok := leaf.PublicKey.(*ecdsa.PublicKey); !ok || pub.Curve != elliptic.P256() {
		t.Errorf("leaf key %T", leaf.PublicKey)
	}
	if want := t0.Add(time.Hour - time.Minute); !leaf.NotBefore.Equal(want) {
		t.Errorf("NotBefore %s, want %s (backdated by the skew)", leaf.NotBefore, want)
	}
	if want := t0.Add(25 * time.Hour); !leaf.NotAfter.Equal(want) {
		t.Errorf("NotAfter %s, want %s", leaf.NotAfter, want)
	}
	// After expiry it no longer verifies.
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inters, CurrentTime: t0.Add(26 * time.Hour), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}}); err == nil {
		t.Error("expired leaf verified")
	}
}

func TestIssueIgnoresRequestedNamesAndCapsLifetime(t *testing.T) {
	_, inter, iss, _ := newPKI(t)
	id := spiffe.New("cluster.local", "a", "b")
	// The identity service rejects such a CSR before; the issuer must
	// still only ever put the given ID into the certificate.
	leaf, err := iss.Issue(csrFor(t, "spiffe://cluster.local/ns/x/sa/y", "https://evil"), Leaf{ID: id, Lifetime: 10 * 365 * 24 * time.Hour, Now: t0})
	if err != nil {
		t.Fatal(err)
	}
	if len(leaf.URIs) != 1 || leaf.URIs[0].String() != id.String() {
		t.Errorf("URIs %v, want only %s", leaf.URIs, id)
	}
	if !leaf.NotAfter.Equal(inter.Cert.NotAfter) {
		t.Errorf("leaf NotAfter %s outlives issuer %s", leaf.NotAfter, inter.Cert.NotAfter)
	}
}

func TestIssueRejects(t *testing.T) {
	_, _, iss, _ := newPKI(t)
	id := spiffe.New("cluster.local", "a", "b")
	bad := csrFor(t, id.String())
	bad.Signature[len(bad.Signature)-3] ^= 0xff
	if _, err := iss.Issue(bad, Leaf{ID: id, Lifetime: time.Hour}); err == nil || !strings.Contains(err.Error(), "signature") {
		t.Errorf("bad signature: %v", err)
	}
	p384, _ := ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	der, _ := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, p384)
	csr384, _ := x509.ParseCertificateRequest(der)
	if _, err := iss.Issue(csr384, Leaf{ID: id, Lifetime: time.Hour}); err == nil || !strings.Contains(err.Error(), "P-256") {
		t.Errorf("P-384 key: %v", err)
	}
	if _, err := iss.Issue(csrFor(t), Leaf{ID: id}); err == nil {
		t.Error("zero lifetime accepted")
	}
}

func TestNewIssuerChecks(t *testing.T) {
	anchor, inter, _, roots := newPKI(t)
	other, _ := NewAnchor(CAOptions{TrustDomain: "cluster.local", Now: t0})
	otherRoots := x509.NewCertPool()
	otherRoots.AddCert(other.Cert)
	for name, tc := range map[string]struct {
		chain []*x509.Certificate
		key   *ecdsa.PrivateKey
		roots *x509.CertPool
		now   time.Time
		want  string
	}{
		"wrong key":      {[]*x509.Certificate{inter.Cert}, anchor.Key, roots, t0, "does not belong"},
		"other anchor":   {[]*x509.Certificate{inter.Cert}, inter.Key, otherRoots, t0, "does not verify"},
		"expired issuer": {[]*x509.Certificate{inter.Cert}, inter.Key, roots, t0.Add(2 * DefaultIssuerLifetime), "does not verify"},
	} {
		if _, err := NewIssuer(tc.chain, tc.key, tc.roots, tc.now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want error with %q", name, err, tc.want)
		}
	}
	// The anchor itself may act as issuer (a one-level PKI).
	if _, err := NewIssuer([]*x509.Certificate{anchor.Cert}, anchor.Key, roots, t0); err != nil {
		t.Errorf("anchor as issuer: %v", err)
	}
}

func TestPEMRoundTrip(t *testing.T) {
	anchor, inter, _, roots := newPKI(t)
	certs, err := ParseCerts(EncodeCerts(inter.Cert, anchor.Cert))
	if err != nil || len(certs) != 2 || !certs[0].Equal(inter.Cert) || !certs[1].Equal(anchor.Cert) {
		t.Fatalf("ParseCerts = %d certs, %v", len(certs), err)
	}
	keyPEM, err := EncodeKey(inter.Key)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(keyPEM), "-----BEGIN PRIVATE KEY-----") {
		t.Errorf("key PEM starts %q", keyPEM[:30])
	}
	iss, err := ParseIssuer(EncodeCerts(inter.Cert), keyPEM, roots, t0)
	if err != nil {
		t.Fatal(err)
	}
	if !iss.Certificate().Equal(inter.Cert) {
		t.Error("ParseIssuer returned another certificate")
	}
	sec1, _ := x509.MarshalECPrivateKey(inter.Key)
	k, err := ParseKey([]byte("-----BEGIN EC PRIVATE KEY-----\n" + b64(sec1) + "\n-----END EC PRIVATE KEY-----\n"))
	if err != nil || !k.Equal(inter.Key) {
		t.Errorf("SEC 1 key: %v", err)
	}
	if _, err := ParseCerts(append(EncodeCerts(anchor.Cert), "\n \n"...)); err != nil {
		t.Errorf("ParseCerts of a certificate and white space: %v", err)
	}
	for _, bad := range []string{"", "garbage", string(keyPEM), string(EncodeCerts(anchor.Cert)) + "trailing"} {
		if _, err := ParseCerts([]byte(bad)); err == nil {
			t.Errorf("ParseCerts(%.20q) succeeded", bad)
		}
	}
	if _, err := ParseKey(EncodeCerts(anchor.Cert)); err == nil || !strings.Contains(err.Error(), "CERTIFICATE") {
		t.Errorf("ParseKey(cert) = %v", err)
	}
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
