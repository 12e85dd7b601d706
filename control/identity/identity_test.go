package identity

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"errors"
	"net"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/mesh/api/identitypb"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/identitytest"
)

const testNS = "plexus-system"

type fixture struct {
	srv     *Server
	client  kubernetes.Interface
	tokens  *identitytest.Tokens
	anchor  pki.CA
	issuer  pki.CA
	anchors *x509.CertPool
	skew    atomic.Int64 // the server's clock is ahead of time.Now() by this many nanoseconds
}

func testPKI(t testing.TB, anchor *pki.CA) (pki.CA, pki.CA) {
	t.Helper()
	var err error
	if anchor == nil {
		a, err := pki.NewAnchor(pki.CAOptions{TrustDomain: "cluster.local"})
		if err != nil {
			t.Fatal(err)
		}
		anchor = &a
	}
	iss, err := pki.NewIntermediate(*anchor, pki.CAOptions{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	return *anchor, iss
}

func testSecret(t testing.TB, anchor, issuer pki.CA) *corev1.Secret {
	t.Helper()
	sec, err := IssuerSecret(testNS, DefaultSecretName, []*x509.Certificate{anchor.Cert}, issuer)
	if err != nil {
		t.Fatal(err)
	}
	return sec
}

// newFixture runs a Server on a fake clientset holding the issuer Secret
// (none if withSecret is false), with TokenReviews answered by tokens.
func newFixture(t *testing.T, withSecret bool, tokens map[string]identitytest.Answer) *fixture {
	t.Helper()
	anchor, issuer := testPKI(t, nil)
	var objs []runtime.Object
	if withSecret {
		objs = append(objs, testSecret(t, anchor, issuer))
	}
	f := &fixture{tokens: identitytest.NewTokens(tokens), anchor: anchor, issuer: issuer}
	f.client = identitytest.FakeClient(f.tokens, objs...)
	f.anchors = x509.NewCertPool()
	f.anchors.AddCert(anchor.Cert)
	srv, err := New(Config{TrustDomain: "cluster.local", Namespace: testNS}, Deps{Client: f.client, Metrics: prometheus.NewRegistry(), Log: identitytest.Log(t),
		Now: func() time.Time { return time.Now().Add(time.Duration(f.skew.Load())) }})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); srv.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if withSecret {
		waitFor(t, "issuer loaded", func() bool { return srv.Ready() == nil })
	}
	return f
}

func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	eventually.Within(t, 10*time.Second, what, cond)
}

// csrOpts describe a test CSR.
type csrOpts struct {
	uris   []string
	dns    []string
	ips    []net.IP
	emails []string
}

func makeCSR(t testing.TB, o csrOpts) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.CertificateRequest{DNSNames: o.dns, IPAddresses: o.ips, EmailAddresses: o.emails}
	for _, u := range o.uris {
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatal(err)
	}
	return der
}

const (
	webID   = "spiffe://cluster.local/ns/emojivoto/sa/web"
	voteID  = "spiffe://cluster.local/ns/emojivoto/sa/voting"
	otherTD = "spiffe://example.org/ns/emojivoto/sa/web"
)

func TestCertifyTable(t *testing.T) {
	f := newFixture(t, true, map[string]identitytest.Answer{
		"web":       identitytest.ServiceAccount("emojivoto", "web", DefaultAudience),
		"web-multi": identitytest.ServiceAccount("emojivoto", "web", "https://kubernetes.default.svc", DefaultAudience),
		"expired":   {Status: authnv1.TokenReviewStatus{Error: "[invalid bearer token, service account token has expired]"}},
		"unauth":    {Status: authnv1.TokenReviewStatus{}},
		"other-aud": identitytest.ServiceAccount("emojivoto", "web", "https://kubernetes.default.svc"),
		"not-sa":    {Status: authnv1.TokenReviewStatus{Authenticated: true, Audiences: []string{DefaultAudience}, User: authnv1.UserInfo{Username: "admin"}}},
		"apierr":    {Err: errors.New("etcdserver: request timed out")},
	})
	badSig := makeCSR(t, csrOpts{uris: []string{webID}})
	badSig[len(badSig)-5] ^= 0xff

	for _, tc := range []struct {
		name     string
		identity string
		token    string
		csr      []byte
		code     codes.Code
		reason   string // metric label; "" for success
		msg      string // in the error message
	}{
		{"ok", webID, "web", makeCSR(t, csrOpts{uris: []string{webID}}), codes.OK, "", ""},
		{"ok, token with several audiences", webID, "web-multi", makeCSR(t, csrOpts{uris: []string{webID}}), codes.OK, "", ""},
		{"wrong identity: token of another SA", voteID, "web", makeCSR(t, csrOpts{uris: []string{voteID}}), codes.PermissionDenied, "identity_mismatch", `"system:serviceaccount:emojivoto:web"`},
		{"token of a user, not an SA", webID, "not-sa", makeCSR(t, csrOpts{uris: []string{webID}}), codes.PermissionDenied, "identity_mismatch", `"admin"`},
		{"CSR asks for another identity", webID, "web", makeCSR(t, csrOpts{uris: []string{voteID}}), codes.InvalidArgument, "csr_mismatch", "asks for " + voteID},
		{"missing SAN", webID, "web", makeCSR(t, csrOpts{}), codes.InvalidArgument, "csr_mismatch", "no URI SAN"},
		{"extra URI SAN", webID, "web", makeCSR(t, csrOpts{uris: []string{webID, voteID}}), codes.InvalidArgument, "csr_mismatch", "2 URI SANs"},
		{"extra DNS SAN", webID, "web", makeCSR(t, csrOpts{uris: []string{webID}, dns: []string{"web.emojivoto.svc"}}), codes.InvalidArgument, "csr_mismatch", "DNS names [web.emojivoto.svc]"},
		{"extra IP SAN", webID, "web", makeCSR(t, csrOpts{uris: []string{webID}, ips: []net.IP{net.IPv4(10, 0, 0, 1)}}), codes.InvalidArgument, "csr_mismatch", "IP addresses"},
		{"extra e-mail SAN", webID, "web", makeCSR(t, csrOpts{uris: []string{webID}, emails: []string{"a@b.c"}}), codes.InvalidArgument, "csr_mismatch", "e-mail"},
		{"expired token", webID, "expired", makeCSR(t, csrOpts{uris: []string{webID}}), codes.Unauthenticated, "unauthenticated", "has expired"},
		{"TokenReview unauthenticated", webID, "unauth", makeCSR(t, csrOpts{uris: []string{webID}}), codes.Unauthenticated, "unauthenticated", "did not authenticate"},
		{"unknown token", webID, "garbage", makeCSR(t, csrOpts{uris: []string{webID}}), codes.Unauthenticated, "unauthenticated", "invalid bearer token"},
		{"no token", webID, "", makeCSR(t, csrOpts{uris: []string{webID}}), codes.Unauthenticated, "unauthenticated", "no token"},
		{"wrong audience", webID, "other-aud", makeCSR(t, csrOpts{uris: []string{webID}}), codes.Unauthenticated, "wrong_audience", "do not include identity.plexus.dev"},
		{"wrong trust domain", otherTD, "web", makeCSR(t, csrOpts{uris: []string{otherTD}}), codes.InvalidArgument, "invalid_identity", "not in trust domain cluster.local"},
		{"malformed identity", "spiffe://cluster.local/web", "web", makeCSR(t, csrOpts{uris: []string{webID}}), codes.InvalidArgument, "invalid_identity", "path must be"},
		{"bad CSR signature", webID, "web", badSig, codes.InvalidArgument, "invalid_csr", "signature"},
		{"CSR not DER", webID, "web", []byte("hello"), codes.InvalidArgument, "invalid_csr", "certificate signing request"},
		{"TokenReview API error", webID, "apierr", makeCSR(t, csrOpts{uris: []string{webID}}), codes.Unavailable, "token_review_failed", "request timed out"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := testutil.ToFloat64(f.srv.metrics.rejected.WithLabelValues(tc.reason))
			issuedBefore := testutil.ToFloat64(f.srv.metrics.issued)
			resp, err := f.srv.Certify(context.Background(), &identitypb.CertifyRequest{Identity: tc.identity, Token: []byte(tc.token), CertificateSigningRequest: tc.csr})
			if got := status.Code(err); got != tc.code {
				t.Fatalf("code %s (%v), want %s", got, err, tc.code)
			}
			if tc.code != codes.OK {
				if !strings.Contains(err.Error(), tc.msg) {
					t.Errorf("error %q does not mention %q", err, tc.msg)
				}
				if got := testutil.ToFloat64(f.srv.metrics.rejected.WithLabelValues(tc.reason)); got != before+1 {
					t.Errorf("rejected{reason=%q} went %v -> %v", tc.reason, before, got)
				}
				return
			}
			if got := testutil.ToFloat64(f.srv.metrics.issued); got != issuedBefore+1 {
				t.Errorf("issued went %v -> %v", issuedBefore, got)
			}
			leaf := f.verify(t, resp, time.Now())
			if got := leaf.URIs[0].String(); got != tc.identity {
				t.Errorf("leaf names %s, want %s", got, tc.identity)
			}
			if d := leaf.NotAfter.Sub(leaf.NotBefore); d != DefaultCertLifetime+DefaultClockSkew {
				t.Errorf("leaf validity %s, want 24h plus 1m backdating", d)
			}
		})
	}
	audiences := f.tokens.Audiences()
	for _, aud := range audiences {
		if len(aud) != 1 || aud[0] != DefaultAudience {
			t.Errorf("a TokenReview asked for audiences %v, want [%s]", aud, DefaultAudience)
		}
	}
	if len(audiences) == 0 {
		t.Error("no TokenReview was made")
	}
}

// verify checks that a response's leaf chains through its intermediates to
// the fixture's anchors, that valid_until is the leaf's NotAfter, and
// returns the leaf.
func (f *fixture) verify(t testing.TB, resp *identitypb.CertifyResponse, at time.Time) *x509.Certificate {
	t.Helper()
	leaf, err := x509.ParseCertificate(resp.LeafCertificate)
	if err != nil {
		t.Fatal(err)
	}
	if err := verifyChain(leaf, resp.IntermediateCertificates, f.anchors, at); err != nil {
		t.Fatal(err)
	}
	if !resp.ValidUntil.AsTime().Equal(leaf.NotAfter) {
		t.Errorf("valid_until %s, leaf NotAfter %s", resp.ValidUntil.AsTime(), leaf.NotAfter)
	}
	return leaf
}

func verifyChain(leaf *x509.Certificate, intermediates [][]byte, anchors *x509.CertPool, at time.Time) error {
	pool := x509.NewCertPool()
	for _, der := range intermediates {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return err
		}
		pool.AddCert(c)
	}
	_, err := leaf.Verify(x509.VerifyOptions{Roots: anchors, Intermediates: pool, CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}})
	return err
}

func TestCertifyWithoutIssuer(t *testing.T) {
	f := newFixture(t, false, map[string]identitytest.Answer{"web": identitytest.ServiceAccount("emojivoto", "web", DefaultAudience)})
	if err := f.srv.Ready(); !errors.Is(err, ErrIssuerNotLoaded) || !strings.Contains(err.Error(), testNS+"/"+DefaultSecretName) {
		t.Fatalf("Ready = %v, want ErrIssuerNotLoaded naming the Secret", err)
	}
	_, err := f.srv.Certify(context.Background(), &identitypb.CertifyRequest{Identity: webID, Token: []byte("web"), CertificateSigningRequest: makeCSR(t, csrOpts{uris: []string{webID}})})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "issuer not loaded") {
		t.Fatalf("Certify = %v, want Unavailable: issuer not loaded", err)
	}
	if _, err := f.srv.TLSConfig().GetCertificate(nil); !errors.Is(err, ErrIssuerNotLoaded) {
		t.Fatalf("serving certificate without issuer: %v", err)
	}
	// The Secret appears later: the service picks it up.
	if _, err := f.client.CoreV1().Secrets(testNS).Create(context.Background(), testSecret(t, f.anchor, f.issuer), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "issuer loaded", func() bool { return f.srv.Ready() == nil })
	if got := testutil.ToFloat64(f.srv.metrics.issuerExpiry); got != float64(f.issuer.Cert.NotAfter.Unix()) {
		t.Errorf("issuer expiry metric %v, want %d", got, f.issuer.Cert.NotAfter.Unix())
	}
}

func TestIssuerRotationAndBadSecret(t *testing.T) {
	f := newFixture(t, true, map[string]identitytest.Answer{"web": identitytest.ServiceAccount("emojivoto", "web", DefaultAudience)})
	certify := func() *identitypb.CertifyResponse {
		t.Helper()
		resp, err := f.srv.Certify(context.Background(), &identitypb.CertifyRequest{Identity: webID, Token: []byte("web"), CertificateSigningRequest: makeCSR(t, csrOpts{uris: []string{webID}})})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	old := certify()
	oldServing, err := f.srv.TLSConfig().GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	secrets := f.client.CoreV1().Secrets(testNS)

	// A broken version keeps the old issuer and counts an error.
	broken := testSecret(t, f.anchor, f.issuer)
	broken.Data[SecretKeyKey] = []byte("not a key")
	if _, err := secrets.Update(context.Background(), broken, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "load error counted", func() bool { return testutil.ToFloat64(f.srv.metrics.loadErrors) == 1 })
	if f.srv.Ready() != nil {
		t.Fatalf("Ready after a bad Secret version: %v", f.srv.Ready())
	}
	if got := f.verify(t, certify(), time.Now()); !bytesEqual(got.AuthorityKeyId, f.issuer.Cert.SubjectKeyId) {
		t.Error("after a bad Secret version the certificate is not from the old issuer")
	}

	// Rotation: a new issuer signed by the same anchor.
	_, next := testPKI(t, &f.anchor)
	if _, err := secrets.Update(context.Background(), testSecret(t, f.anchor, next), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "new issuer in use", func() bool {
		l := f.srv.issuer.Load()
		return l != nil && l.issuer.Certificate().Equal(next.Cert)
	})
	resp := certify()
	leaf := f.verify(t, resp, time.Now())
	if !bytesEqual(leaf.AuthorityKeyId, next.Cert.SubjectKeyId) {
		t.Error("new certificate not signed by the new issuer")
	}
	if ic, _ := x509.ParseCertificate(resp.IntermediateCertificates[0]); !ic.Equal(next.Cert) {
		t.Error("response does not carry the new issuer")
	}
	f.verify(t, old, time.Now()) // certificates of the old issuer still verify against the anchor
	newServing, err := f.srv.TLSConfig().GetCertificate(nil)
	if err != nil {
		t.Fatal(err)
	}
	if newServing == oldServing || !bytesEqual(newServing.Leaf.AuthorityKeyId, next.Cert.SubjectKeyId) {
		t.Error("serving certificate not re-issued by the new issuer")
	}
	if got := testutil.ToFloat64(f.srv.metrics.issuerExpiry); got != float64(next.Cert.NotAfter.Unix()) {
		t.Errorf("issuer expiry metric %v, want %d", got, next.Cert.NotAfter.Unix())
	}

	// An issuer from a foreign anchor is refused.
	_, foreign := testPKI(t, nil)
	mixed := testSecret(t, f.anchor, foreign)
	if _, err := secrets.Update(context.Background(), mixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "second load error", func() bool { return testutil.ToFloat64(f.srv.metrics.loadErrors) == 2 })
	if l := f.srv.issuer.Load(); !l.issuer.Certificate().Equal(next.Cert) {
		t.Error("an issuer that does not chain to the anchors replaced the good one")
	}
}

func bytesEqual(a, b []byte) bool { return len(a) > 0 && string(a) == string(b) }

func TestServingCertificateRenews(t *testing.T) {
	f := newFixture(t, true, nil)
	now := time.Now()
	c1, err := f.srv.servingCertificate()
	if err != nil {
		t.Fatal(err)
	}
	id, err := spiffe.FromCert(c1.Leaf)
	if err != nil || id != spiffe.New("cluster.local", testNS, DefaultServiceAccount) {
		t.Fatalf("serving identity %v, %v", id, err)
	}
	if err := verifyChain(c1.Leaf, c1.Certificate[1:], f.anchors, now); err != nil {
		t.Fatal(err)
	}
	now = now.Add(DefaultCertLifetime / 2)
	f.skew.Store(int64(DefaultCertLifetime / 2))
	if c2, _ := f.srv.servingCertificate(); c2 != c1 {
		t.Error("serving certificate re-issued at half its lifetime")
	}
	f.skew.Store(int64(DefaultCertLifetime * 3 / 4))
	if c3, _ := f.srv.servingCertificate(); c3 == c1 || !c3.Leaf.NotAfter.After(c1.Leaf.NotAfter) {
		t.Error("serving certificate not re-issued at 75% of its lifetime")
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{TrustDomain: "cluster.local", Namespace: "plexus-system"}.WithDefaults()
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	if ok.CertLifetime != 24*time.Hour || ok.ClockSkew != time.Minute || ok.Audience != "identity.plexus.dev" || ok.SecretName != "plexus-identity-issuer" {
		t.Errorf("defaults %+v", ok)
	}
	for name, mod := range map[string]func(*Config){
		"trust domain": func(c *Config) { c.TrustDomain = "" },
		"namespace":    func(c *Config) { c.Namespace = "" },
		"lifetime":     func(c *Config) { c.CertLifetime = -time.Hour },
		"clock skew":   func(c *Config) { c.ClockSkew = 25 * time.Hour },
	} {
		c := ok
		mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}
