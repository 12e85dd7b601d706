package certify

import (
	"context"
	"crypto"
	"crypto/x509"
	"errors"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/identitytest"
	"github.com/plexus-mesh/plexus/testsupport/logwatch"
)

const ns = "plexus-system"

var (
	serverID = spiffe.New("cluster.local", ns, "plexus-identity")
	webID    = spiffe.New("cluster.local", "emojivoto", "web")
)

// env is a real identity server in-process, on a fake clientset whose
// TokenReviews accept the token "web" for emojivoto/web.
type env struct {
	addr    string
	anchors *x509.CertPool
	stop    func() // stops the server
}

func startServer(t *testing.T, lifetime time.Duration) *env {
	t.Helper()
	anchor, err := pki.NewAnchor(pki.CAOptions{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	issuer, err := pki.NewIntermediate(anchor, pki.CAOptions{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := identity.IssuerSecret(ns, identity.DefaultSecretName, []*x509.Certificate{anchor.Cert}, issuer)
	if err != nil {
		t.Fatal(err)
	}
	tokens := identitytest.NewTokens(map[string]identitytest.Answer{"web": identitytest.ServiceAccount("emojivoto", "web", identity.DefaultAudience)})
	srv, err := identity.New(identity.Config{TrustDomain: "cluster.local", Namespace: ns, CertLifetime: lifetime, ClockSkew: lifetime / 10},
		identity.Deps{Client: identitytest.FakeClient(tokens, secret), Metrics: prometheus.NewRegistry(), Log: identitytest.Log(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln := identitytest.Listen(t)
	e := &env{addr: ln.Addr().String(), anchors: x509.NewCertPool()}
	e.anchors.AddCert(anchor.Cert)
	e.stop = identitytest.Run(t, srv.Run, func(ctx context.Context) error { return srv.Serve(ctx, ln) })
	identitytest.Eventually(t, 10*time.Second, "identity server ready", srv.Ready)
	return e
}

func (e *env) client(t *testing.T, server spiffe.ID, tokenFile string) *Client {
	t.Helper()
	c, err := New(Config{Addr: e.addr, ServerID: server, ID: webID, TokenFile: tokenFile, TrustAnchors: e.anchors, Log: identitytest.Log(t)})
	if err != nil {
		t.Fatal(err)
	}
	c.backoffMin, c.backoffMax = 20*time.Millisecond, 200*time.Millisecond
	return c
}

func mustCert(t *testing.T, c *Client) *x509.Certificate {
	t.Helper()
	cert, err := c.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	return cert.Leaf
}

func TestFirstCertificateAndRenewal(t *testing.T) {
	e := startServer(t, 2*time.Second)
	tokenFile := identitytest.TokenFile(t, "web\n")
	c := e.client(t, serverID, tokenFile)
	if err := c.Ready(); err == nil || !strings.Contains(err.Error(), "no certificate for "+webID.String()+" yet: waiting for identity service "+e.addr) {
		t.Fatalf("Ready before Run = %v", err)
	}
	var refused atomic.Int32
	c.cfg.Log = logwatch.New(c.cfg.Log.Handler(), func(r slog.Record) {
		if r.Message == "certificate request failed" {
			refused.Add(1)
		}
	})
	identitytest.Run(t, c.Run)
	identitytest.Eventually(t, 10*time.Second, "first certificate", c.Ready)
	cert, err := c.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := spiffe.FromCert(cert.Leaf); err != nil || got != webID {
		t.Fatalf("certificate names %v, %v", got, err)
	}
	if len(cert.Certificate) != 2 {
		t.Errorf("chain has %d certificates, want leaf + issuer", len(cert.Certificate))
	}
	issuer, _ := x509.ParseCertificate(cert.Certificate[1])
	inter := x509.NewCertPool()
	inter.AddCert(issuer)
	if _, err := cert.Leaf.Verify(x509.VerifyOptions{Roots: c.Roots(), Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("leaf + chain do not verify to Roots(): %v", err)
	}
	if signer, ok := cert.PrivateKey.(interface{ Public() crypto.PublicKey }); !ok || !cert.Leaf.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(signer.Public()) {
		t.Error("private key does not match the leaf")
	}
	if c.ID() != webID {
		t.Errorf("ID() = %s", c.ID())
	}

	// Renewal at 70% of the 2s lifetime: a new certificate, valid longer.
	first := cert.Leaf
	identitytest.Eventually(t, 5*time.Second, "renewal", func() error {
		if l := mustCert(t, c); l.SerialNumber.Cmp(first.SerialNumber) == 0 {
			return errors.New("still the first certificate")
		}
		return nil
	})
	if second := mustCert(t, c); !second.NotAfter.After(first.NotAfter) {
		t.Errorf("renewed certificate ends %s, not after the first's %s", second.NotAfter, first.NotAfter)
	}

	// The token is re-read on every request: a revoked token makes
	// renewals fail, the held certificate stays in use until it expires,
	// then Ready names the refusal.
	if err := os.WriteFile(tokenFile, []byte("revoked"), 0o600); err != nil {
		t.Fatal(err)
	}
	held := mustCert(t, c)
	before := refused.Load()
	eventually.Within(t, 5*time.Second, "a renewal with the revoked token refused", func() bool { return refused.Load() > before })
	if l := mustCert(t, c); l.SerialNumber.Cmp(held.SerialNumber) != 0 || c.Ready() != nil {
		t.Fatalf("certificate renewed with a revoked token, or not kept while valid: %v", c.Ready())
	}
	identitytest.Eventually(t, 5*time.Second, "expiry reported", func() error {
		if err := c.Ready(); err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), "Unauthenticated") {
			return errors.New("Ready = " + errString(err))
		}
		return nil
	})
	// A valid token again: the client recovers.
	if err := os.WriteFile(tokenFile, []byte("web"), 0o600); err != nil {
		t.Fatal(err)
	}
	identitytest.Eventually(t, 5*time.Second, "recovery", c.Ready)
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}

func TestServerDownKeepsValidCertificate(t *testing.T) {
	e := startServer(t, 3*time.Second)
	c := e.client(t, serverID, identitytest.TokenFile(t, "web"))
	identitytest.Run(t, c.Run)
	identitytest.Eventually(t, 10*time.Second, "first certificate", c.Ready)
	held := mustCert(t, c)
	e.stop()
	// Until it expires the certificate stays in use, renewal failures or not.
	for time.Until(held.NotAfter) > 200*time.Millisecond {
		if err := c.Ready(); err != nil {
			t.Fatalf("not ready %s before expiry with the identity service down: %v", time.Until(held.NotAfter), err)
		}
		if l := mustCert(t, c); l.SerialNumber.Cmp(held.SerialNumber) != 0 {
			t.Fatal("a new certificate with the identity service down")
		}
		// Sleep: the check is that it holds all along, sampled every 100ms; no event marks "still fine".
		time.Sleep(100 * time.Millisecond)
	}
	identitytest.Eventually(t, 5*time.Second, "expiry reported", func() error {
		if err := c.Ready(); err == nil || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), e.addr+" ("+serverID.String()+") unreachable") {
			return errors.New("Ready = " + errString(err))
		}
		return nil
	})
	if _, err := c.Certificate(); err == nil {
		t.Error("Certificate() returned an expired certificate")
	}
}

func TestWrongServerIdentityRefused(t *testing.T) {
	e := startServer(t, time.Hour)
	impostor := spiffe.New("cluster.local", ns, "plexus-destination")
	c := e.client(t, impostor, identitytest.TokenFile(t, "web"))
	identitytest.Run(t, c.Run)
	identitytest.Eventually(t, 10*time.Second, "refusal", func() error {
		err := c.Ready()
		if err == nil {
			t.Fatal("got a certificate from a server with the wrong identity")
		}
		if !strings.Contains(err.Error(), "peer identity mismatch: want "+impostor.String()+", got "+serverID.String()) {
			return err
		}
		return nil
	})
	t.Log(c.Ready())

	// A server whose chain does not lead to our anchors is refused too.
	other, _ := pki.NewAnchor(pki.CAOptions{TrustDomain: "cluster.local"})
	e.anchors = x509.NewCertPool()
	e.anchors.AddCert(other.Cert)
	c2 := e.client(t, serverID, identitytest.TokenFile(t, "web"))
	identitytest.Run(t, c2.Run)
	identitytest.Eventually(t, 10*time.Second, "refusal", func() error {
		if err := c2.Ready(); err == nil || !strings.Contains(err.Error(), "identity server certificate") {
			return errors.New("Ready = " + errString(err))
		}
		return nil
	})
}

func TestMissingTokenFile(t *testing.T) {
	e := startServer(t, time.Hour)
	c := e.client(t, serverID, "/nonexistent/token")
	identitytest.Run(t, c.Run)
	identitytest.Eventually(t, 10*time.Second, "error naming the token file", func() error {
		if err := c.Ready(); err == nil || !strings.Contains(err.Error(), "/nonexistent/token") {
			return errors.New("Ready = " + errString(err))
		}
		return nil
	})
}

func TestBackoffCappedWithJitter(t *testing.T) {
	c := &Client{backoffMin: 500 * time.Millisecond, backoffMax: 30 * time.Second}
	for n, want := range map[int]time.Duration{1: 500 * time.Millisecond, 2: time.Second, 4: 4 * time.Second, 10: 30 * time.Second, 100: 30 * time.Second} {
		seen := map[time.Duration]bool{}
		for range 50 {
			d := c.backoff(n)
			if d < want/2 || d > want {
				t.Fatalf("backoff(%d) = %s, want in [%s, %s]", n, d, want/2, want)
			}
			seen[d] = true
		}
		if len(seen) < 2 {
			t.Errorf("backoff(%d) has no jitter", n)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	good := Config{Addr: "x:8080", ServerID: serverID, ID: webID, TokenFile: "/t", TrustAnchors: x509.NewCertPool(), Log: identitytest.Log(t)}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*Config){
		"address":      func(c *Config) { c.Addr = "" },
		"server ID":    func(c *Config) { c.ServerID = spiffe.ID{} },
		"identity":     func(c *Config) { c.ID = spiffe.ID{} },
		"token file":   func(c *Config) { c.TokenFile = "" },
		"trust anchor": func(c *Config) { c.TrustAnchors = nil },
		"renew":        func(c *Config) { c.Renew = 1 },
		"logger":       func(c *Config) { c.Log = nil },
	} {
		c := good
		mod(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: Validate = %v", name, err)
		}
	}
}
