package identity_test

import (
	"context"
	"crypto/x509"
	"log/slog"
	"math/big"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/mesh/identity/certify"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/identitytest"
	"github.com/plexus-mesh/plexus/testsupport/logwatch"
)

// serve runs an identity server for ns on loopback, logging to log, with
// the reserved namespaces given, and returns its address.
func serve(t *testing.T, client kubernetes.Interface, log *slog.Logger, ns string, reserved ...string) (*identity.Server, string) {
	t.Helper()
	srv, err := identity.New(identity.Config{TrustDomain: "cluster.local", Namespace: ns, ReservedNamespaces: reserved},
		identity.Deps{Client: client, Metrics: prometheus.NewRegistry(), Log: log})
	if err != nil {
		t.Fatal(err)
	}
	ln := identitytest.Listen(t)
	identitytest.Run(t, srv.Run, func(ctx context.Context) error { return srv.Serve(ctx, ln) })
	return srv, ln.Addr().String()
}

// startClient runs a certify client for id with token and returns it.
func startClient(t *testing.T, addr string, server, id spiffe.ID, token string, anchors *x509.CertPool) *certify.Client {
	t.Helper()
	c, err := certify.New(certify.Config{Addr: addr, ServerID: server, ID: id, TokenFile: identitytest.TokenFile(t, token),
		TrustAnchors: anchors, Log: identitytest.Log(t)})
	if err != nil {
		t.Fatal(err)
	}
	identitytest.Run(t, c.Run)
	return c
}

type loadedSerials struct {
	mu      sync.Mutex
	serials map[string]bool
}

// recordIssuers returns the test's logger, recording the serials of the
// issuers the server logs as loaded: the event of its picking up a
// rotated issuer Secret.
func recordIssuers(t *testing.T) (*slog.Logger, *loadedSerials) {
	loaded := &loadedSerials{serials: map[string]bool{}}
	return logwatch.New(identitytest.Log(t).Handler(), func(r slog.Record) {
		if r.Message != "issuer loaded" {
			return
		}
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "serial" {
				loaded.mu.Lock()
				loaded.serials[a.Value.String()] = true
				loaded.mu.Unlock()
			}
			return true
		})
	}), loaded
}

// has reports whether the issuer with serial was loaded.
func (l *loadedSerials) has(serial *big.Int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.serials[serial.Text(16)]
}

// waitRefused waits until c has failed and returns its Ready error.
func waitRefused(t *testing.T, c *certify.Client) error {
	t.Helper()
	identitytest.Eventually(t, 30*time.Second, "an answer", func() error {
		if err := c.Ready(); err != nil && strings.Contains(err.Error(), "waiting for") {
			return err
		}
		return nil
	})
	err := c.Ready()
	if err == nil {
		t.Fatal("client got a certificate")
	}
	return err
}

// TestRealAPIServer runs the identity service as its own service account
// with only the RBAC it ships with, against a real kube-apiserver:
// TokenRequest tokens for identity.plexus.dev get certificates over gRPC
// with TLS, other tokens are refused, and rotating the issuer Secret
// switches issuers while the old certificates stay valid.
func TestRealAPIServer(t *testing.T) {
	k := identitytest.RealAPIServer(t)
	ns := k.Namespace(t, "plexus-identity-test")
	// A tenant's namespace standing in for plexus-viz (the real one is
	// the cluster's): reserved, so its service accounts are certified only
	// once declared.
	tapNS := k.Namespace(t, "tap-tenant")
	k.GrantIdentityRBAC(t, ns, identity.DefaultServiceAccount, identity.DefaultSecretName, identity.DeclarationName(tapNS))
	serverClient := k.As(t, k.ServiceAccount(t, ns, identity.DefaultServiceAccount))

	anchor, err := pki.NewAnchor(pki.CAOptions{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	issuer1, err := pki.NewIntermediate(anchor, pki.CAOptions{TrustDomain: "cluster.local"})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := identity.IssuerSecret(ns, identity.DefaultSecretName, []*x509.Certificate{anchor.Cert}, issuer1)
	if err != nil {
		t.Fatal(err)
	}
	secrets := k.Admin.CoreV1().Secrets(ns)
	if _, err := secrets.Create(context.Background(), secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	log, loaded := recordIssuers(t)
	srv, addr := serve(t, serverClient, log, ns, tapNS)
	identitytest.Eventually(t, 30*time.Second, "identity server ready", srv.Ready)
	anchors := x509.NewCertPool()
	anchors.AddCert(anchor.Cert)
	serverID := spiffe.New("cluster.local", ns, identity.DefaultServiceAccount)
	webID := spiffe.New("cluster.local", ns, "web")

	web := startClient(t, addr, serverID, webID, k.ServiceAccount(t, ns, "web", identity.DefaultAudience), anchors)
	identitytest.Eventually(t, 30*time.Second, "web's certificate", web.Ready)
	cert1, err := web.Certificate()
	if err != nil {
		t.Fatal(err)
	}
	if got, err := spiffe.FromCert(cert1.Leaf); err != nil || got != webID {
		t.Fatalf("certificate names %v (%v), want %s", got, err, webID)
	}
	if string(cert1.Leaf.AuthorityKeyId) != string(issuer1.Cert.SubjectKeyId) {
		t.Error("certificate not signed by the issuer of the Secret")
	}

	t.Run("token for another audience", func(t *testing.T) {
		other := startClient(t, addr, serverID, webID, k.Token(t, ns, "web", "other.example"), anchors)
		if err := waitRefused(t, other); !strings.Contains(err.Error(), "Unauthenticated") {
			t.Errorf("Ready = %v, want Unauthenticated", err)
		}
	})
	t.Run("token of the API server's own audience", func(t *testing.T) {
		other := startClient(t, addr, serverID, webID, k.Token(t, ns, "web"), anchors)
		if err := waitRefused(t, other); !strings.Contains(err.Error(), "Unauthenticated") {
			t.Errorf("Ready = %v, want Unauthenticated", err)
		}
	})
	t.Run("token of another service account", func(t *testing.T) {
		db := startClient(t, addr, serverID, spiffe.New("cluster.local", ns, "db"), k.Token(t, ns, "web", identity.DefaultAudience), anchors)
		if err := waitRefused(t, db); !strings.Contains(err.Error(), "PermissionDenied") {
			t.Errorf("Ready = %v, want PermissionDenied", err)
		}
	})

	t.Run("reserved namespace: refused until declared", func(t *testing.T) {
		tapID := spiffe.New("cluster.local", tapNS, "plexus-tap")
		token := k.ServiceAccount(t, tapNS, "plexus-tap", identity.DefaultAudience)
		tenant := startClient(t, addr, serverID, tapID, token, anchors)
		if err := waitRefused(t, tenant); !strings.Contains(err.Error(), "PermissionDenied") || !strings.Contains(err.Error(), "reserved") {
			t.Errorf("Ready = %v, want PermissionDenied naming the reserved namespace", err)
		}
		decl := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: identity.DeclarationName(tapNS)}, Data: map[string]string{"namespace": tapNS}}
		if _, err := k.Admin.CoreV1().ConfigMaps(ns).Create(context.Background(), decl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		declared := startClient(t, addr, serverID, tapID, token, anchors)
		identitytest.Eventually(t, 30*time.Second, "the declared namespace's certificate", declared.Ready)
	})

	t.Run("issuer rotation", func(t *testing.T) {
		issuer2, err := pki.NewIntermediate(anchor, pki.CAOptions{TrustDomain: "cluster.local"})
		if err != nil {
			t.Fatal(err)
		}
		rotated, err := identity.IssuerSecret(ns, identity.DefaultSecretName, []*x509.Certificate{anchor.Cert}, issuer2)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := secrets.Update(context.Background(), rotated, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually.Within(t, 30*time.Second, "the server to load the rotated issuer", func() bool { return loaded.has(issuer2.Cert.SerialNumber) })
		// Once it has, a new workload gets a certificate from the new
		// issuer (and verifies the server's re-issued serving certificate).
		c := startClient(t, addr, serverID, webID, k.Token(t, ns, "web", identity.DefaultAudience), anchors)
		identitytest.Eventually(t, 30*time.Second, "certificate after rotation", c.Ready)
		cert2, _ := c.Certificate()
		if string(cert2.Leaf.AuthorityKeyId) != string(issuer2.Cert.SubjectKeyId) {
			t.Fatal("a certificate issued after the server loaded the rotated issuer comes from the old one")
		}
		// The certificate from the old issuer still verifies against the anchors.
		inter := x509.NewCertPool()
		inter.AddCert(issuer1.Cert)
		if _, err := cert1.Leaf.Verify(x509.VerifyOptions{Roots: anchors, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("certificate of the old issuer no longer verifies: %v", err)
		}
	})
}
