package identitycmd

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/mesh/identity/certify"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/identitytest"
)

// rendered is IssuerMain's output, decoded.
type rendered struct {
	secret  corev1.Secret
	cm      corev1.ConfigMap
	anchors *x509.CertPool
	issuer  *pki.Issuer
}

func runIssuer(t *testing.T, args ...string) rendered {
	t.Helper()
	var out bytes.Buffer
	if err := IssuerMain(context.Background(), args, &out); err != nil {
		t.Fatalf("IssuerMain %v: %v", args, err)
	}
	docs := strings.Split(out.String(), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("%d YAML documents, want a Secret and a ConfigMap:\n%s", len(docs), out.String())
	}
	var r rendered
	if err := yaml.UnmarshalStrict([]byte(docs[0]), &r.secret); err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &r.cm); err != nil {
		t.Fatal(err)
	}
	if r.secret.Kind != "Secret" || r.secret.Type != corev1.SecretTypeTLS || r.secret.Name != "plexus-identity-issuer" || r.secret.Namespace != "plexus-system" {
		t.Errorf("secret %s %s/%s type %s", r.secret.Kind, r.secret.Namespace, r.secret.Name, r.secret.Type)
	}
	if r.cm.Kind != "ConfigMap" || r.cm.Name != "plexus-identity-trust-anchors" || r.cm.Namespace != "plexus-system" {
		t.Errorf("configmap %s %s/%s", r.cm.Kind, r.cm.Namespace, r.cm.Name)
	}
	if string(r.secret.Data["ca.crt"]) != r.cm.Data["ca-bundle.crt"] {
		t.Error("the Secret's ca.crt and the ConfigMap's ca-bundle.crt differ")
	}
	anchors, err := pki.ParseCerts([]byte(r.cm.Data["ca-bundle.crt"]))
	if err != nil {
		t.Fatal(err)
	}
	r.anchors = x509.NewCertPool()
	for _, a := range anchors {
		r.anchors.AddCert(a)
	}
	if r.issuer, err = pki.ParseIssuer(r.secret.Data["tls.crt"], r.secret.Data["tls.key"], r.anchors, time.Now()); err != nil {
		t.Fatalf("rendered issuer: %v", err)
	}
	return r
}

func TestIssuerMainNewAndRotate(t *testing.T) {
	dir := t.TempDir()
	first := runIssuer(t, "--issuer-lifetime", "48h", "--anchor-out", dir)
	if got := time.Until(first.issuer.Certificate().NotAfter); got < 47*time.Hour || got > 48*time.Hour {
		t.Errorf("issuer valid for %s, want 48h", got)
	}
	if fi, err := os.Stat(filepath.Join(dir, "ca.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("anchor key file: %v %v", fi, err)
	}
	// Rotation: a new issuer from the saved anchor; the anchors are unchanged.
	second := runIssuer(t, "--anchor-cert", filepath.Join(dir, "ca.crt"), "--anchor-key", filepath.Join(dir, "ca.key"))
	if second.cm.Data["ca-bundle.crt"] != first.cm.Data["ca-bundle.crt"] {
		t.Error("rotating the issuer changed the trust anchors")
	}
	if second.issuer.Certificate().Equal(first.issuer.Certificate()) {
		t.Error("rotation produced the same issuer")
	}
	if got := time.Until(second.issuer.Certificate().NotAfter); got < 364*24*time.Hour {
		t.Errorf("default issuer lifetime %s, want a year", got)
	}
	// A key that does not belong to the anchor is refused.
	other := t.TempDir()
	runIssuer(t, "--anchor-out", other)
	err := IssuerMain(context.Background(), []string{"--anchor-cert", filepath.Join(dir, "ca.crt"), "--anchor-key", filepath.Join(other, "ca.key")}, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "not the key of") {
		t.Errorf("mismatched anchor key: %v", err)
	}
	if err := IssuerMain(context.Background(), []string{"--anchor-cert", "x"}, io.Discard); err == nil {
		t.Error("--anchor-cert without --anchor-key accepted")
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestMainServes runs `plexus-control identity` as its own service account
// against a real API server, with the Secret IssuerMain renders, and gets
// a certificate from it over TLS.
func TestMainServes(t *testing.T) {
	k := identitytest.RealAPIServer(t)
	ns := k.Namespace(t, "plexus-identitycmd-test")
	k.GrantIdentityRBAC(t, ns, identity.DefaultServiceAccount, identity.DefaultSecretName)
	kubeconfig := k.Kubeconfig(t, k.ServiceAccount(t, ns, identity.DefaultServiceAccount))
	r := runIssuer(t)
	r.secret.Namespace = ns
	if _, err := k.Admin.CoreV1().Secrets(ns).Create(context.Background(), &r.secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var out syncBuffer
	mainErr := make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		mainErr <- Main(ctx, []string{"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--namespace", ns,
			"--kubeconfig", kubeconfig, "--cert-lifetime", "1h"}, &out)
	}()
	var started struct{ GRPC, Admin string }
	identitytest.Eventually(t, 10*time.Second, "start-up log line", func() error {
		line, _, _ := strings.Cut(out.String(), "\n")
		return json.Unmarshal([]byte(line), &started)
	})
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + started.Admin + path)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/live"); code != 200 {
		t.Errorf("/live = %d", code)
	}
	identitytest.Eventually(t, 30*time.Second, "/ready", func() error {
		if code, body := get("/ready"); code != 200 {
			return fmt.Errorf("%d: %s", code, body)
		}
		return nil
	})

	webID := spiffe.New("cluster.local", ns, "web")
	c, err := certify.New(certify.Config{Addr: started.GRPC, ServerID: spiffe.New("cluster.local", ns, "plexus-identity"), ID: webID,
		TokenFile: identitytest.TokenFile(t, k.ServiceAccount(t, ns, "web", "identity.plexus.dev")), TrustAnchors: r.anchors, Log: identitytest.Log(t)})
	if err != nil {
		t.Fatal(err)
	}
	identitytest.Run(t, c.Run)
	identitytest.Eventually(t, 30*time.Second, "certificate", c.Ready)
	cert, _ := c.Certificate()
	if d := cert.Leaf.NotAfter.Sub(cert.Leaf.NotBefore); d != time.Hour+time.Minute {
		t.Errorf("--cert-lifetime 1h gave a certificate valid %s", d)
	}
	_, metrics := get("/metrics")
	for _, want := range []string{"plexus_identity_certificates_issued_total 1", "plexus_identity_issuer_expiry_timestamp_seconds ", `plexus_identity_certify_rejected_total{reason="unauthenticated"} 0`, "go_goroutines"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	cancel()
	select {
	case err := <-mainErr:
		if err != nil {
			t.Fatalf("Main: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Main did not return after its context ended")
	}
}

func TestMainRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--namespace", ""},
		{"--namespace", "x", "--cert-lifetime", "-1h"},
		{"--namespace", "x", "stray"},
	} {
		if err := Main(context.Background(), args, io.Discard); err == nil {
			t.Errorf("Main %v succeeded", args)
		}
	}
}
