package kubeconfig

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/daemonset/plugininstall"
)

const clientCN = "system:node:test-node"

// testPKI is a client CA with one client certificate.
type testPKI struct {
	caPool            *x509.CertPool
	certPEM, keyPEM   []byte
	otherCA, otherKey []byte // a certificate and key the server does not trust
}

func newPKI(t *testing.T) *testPKI {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test client CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	issue := func(parent *x509.Certificate, parentKey *ecdsa.PrivateKey) (certPEM, keyPEM []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: clientCN},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}
		if parent == nil {
			parent, parentKey = tmpl, key
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			t.Fatal(err)
		}
		return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	}
	p := &testPKI{caPool: x509.NewCertPool()}
	p.caPool.AddCert(ca)
	p.certPEM, p.keyPEM = issue(ca, caKey)
	p.otherCA, p.otherKey = issue(nil, nil)
	return p
}

// server is an HTTPS server that answers 200 "ok <who>" when the request
// carries the expected bearer token or a client certificate from pki, and
// 401 otherwise.
func server(t *testing.T, pki *testPKI, token string) (*httptest.Server, []byte) {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != "/prefix/api/v1/namespaces/app/pods/web":
			http.Error(w, "unexpected path "+r.URL.Path, http.StatusNotFound)
		case token != "" && r.Header.Get("Authorization") == "Bearer "+token:
			fmt.Fprint(w, "ok token")
		case len(r.TLS.PeerCertificates) > 0 && r.TLS.PeerCertificates[0].Subject.CommonName == clientCN:
			fmt.Fprint(w, "ok cert")
		default:
			http.Error(w, "unauthenticated", http.StatusUnauthorized)
		}
	}))
	srv.TLS = &tls.Config{ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: pki.caPool}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	return srv, ca
}

func get(t *testing.T, c *Config) (int, string) {
	t.Helper()
	resp, err := c.Client(5 * time.Second).Get(c.URL("/api/v1/namespaces/app/pods/web"))
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// kubeconfig renders a one-context kubeconfig from YAML snippets.
func kubeconfig(cluster, user string) []byte {
	return []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: ctx
contexts:
- name: other
  context: {cluster: nowhere, user: nobody}
- name: ctx
  context: {cluster: c, user: u, namespace: ignored}
clusters:
- name: c
  cluster:
%s
users:
- name: u
  user:
%s
`, indent(cluster), indent(user)))
}

func indent(s string) string {
	if s == "" {
		return "    {}"
	}
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := range lines {
		lines[i] = "    " + lines[i]
	}
	return strings.Join(lines, "\n")
}

func TestAuthenticatesAgainstTLSServer(t *testing.T) {
	pki := newPKI(t)
	srv, ca := server(t, pki, "s3cret")
	dir := t.TempDir()
	write(t, dir, "ca.crt", ca)
	write(t, dir, "token", []byte("  s3cret\n"))
	write(t, dir, "client.crt", pki.certPEM)
	write(t, dir, "client.key", pki.keyPEM)
	// A kubelet's kubeconfig names one file holding both cert and key.
	write(t, dir, "client-current.pem", append(append([]byte{}, pki.certPEM...), pki.keyPEM...))
	server := "server: " + srv.URL + "/prefix/"

	for _, tc := range []struct {
		name, cluster, user, want string
	}{
		{"inline token, CA data", server + "\ncertificate-authority-data: " + b64(ca), "token: s3cret", "ok token"},
		{"tokenFile (relative, trimmed) wins over token, CA file", server + "\ncertificate-authority: ca.crt", "token: stale\ntokenFile: token", "ok token"},
		{"client cert and key files", server + "\ncertificate-authority: " + filepath.Join(dir, "ca.crt"), "client-certificate: client.crt\nclient-key: client.key", "ok cert"},
		{"kubelet-style combined cert+key file", server + "\ncertificate-authority: ca.crt", "client-certificate: client-current.pem\nclient-key: client-current.pem", "ok cert"},
		{"client cert and key data", server + "\ncertificate-authority-data: " + b64(ca), "client-certificate-data: " + b64(pki.certPEM) + "\nclient-key-data: " + b64(pki.keyPEM), "ok cert"},
		{"insecure-skip-tls-verify", server + "\ninsecure-skip-tls-verify: true", "token: s3cret", "ok token"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := write(t, dir, "kubeconfig", kubeconfig(tc.cluster, tc.user))
			c, err := Load(path)
			if err != nil {
				t.Fatal(err)
			}
			if code, body := get(t, c); code != http.StatusOK || body != tc.want {
				t.Fatalf("got %d %q, want 200 %q", code, body, tc.want)
			}
		})
	}

	t.Run("no credentials are unauthenticated", func(t *testing.T) {
		c, err := Parse(kubeconfig(server+"\ncertificate-authority-data: "+b64(ca), ""), dir)
		if err != nil {
			t.Fatal(err)
		}
		if code, _ := get(t, c); code != http.StatusUnauthorized {
			t.Fatalf("got %d, want 401", code)
		}
	})
	t.Run("an untrusted client certificate is not accepted", func(t *testing.T) {
		c, err := Parse(kubeconfig(server+"\ncertificate-authority-data: "+b64(ca),
			"client-certificate-data: "+b64(pki.otherCA)+"\nclient-key-data: "+b64(pki.otherKey)), dir)
		if err != nil {
			t.Fatal(err)
		}
		// Go's client offers only certificates the server's CAs issued, so
		// this one is not sent at all.
		if code, body := get(t, c); code != http.StatusUnauthorized {
			t.Fatalf("got %d %q, want 401", code, body)
		}
	})
	t.Run("the server certificate is verified", func(t *testing.T) {
		c, err := Parse(kubeconfig(server+"\ncertificate-authority-data: "+b64(pki.otherCA), "token: s3cret"), dir)
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Client(5 * time.Second).Get(c.URL("/api/v1/namespaces/app/pods/web"))
		if err == nil || !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("a server certificate from another CA was accepted: %v", err)
		}
	})
}

// TestReadsTheNodeAgentsKubeconfig loads the kubeconfig exactly as
// daemonset/plugininstall writes it for the plugin.
func TestReadsTheNodeAgentsKubeconfig(t *testing.T) {
	srv, ca := server(t, newPKI(t), "agent-token")
	dir := t.TempDir()
	token := write(t, dir, "plexus-cni.token", []byte("agent-token"))
	kc, err := plugininstall.Kubeconfig(srv.URL+"/prefix", ca, token)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Load(write(t, dir, "plexus-cni.kubeconfig", kc))
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, c); code != http.StatusOK || body != "ok token" {
		t.Fatalf("got %d %q", code, body)
	}
}

func TestErrorsNameTheCause(t *testing.T) {
	dir := t.TempDir()
	pki := newPKI(t)
	write(t, dir, "empty-token", []byte(" \n"))
	const srv = "server: https://127.0.0.1:6443"
	for _, tc := range []struct {
		name       string
		kubeconfig []byte
		want       string
	}{
		{"missing server", kubeconfig("insecure-skip-tls-verify: true", "token: t"), `cluster "c" has no server`},
		{"server not a URL", kubeconfig("server: 127.0.0.1:6443", "token: t"), `cluster "c": server`},
		{"server not https", kubeconfig("server: ftp://127.0.0.1:6443", "token: t"), "is not an http(s) URL"},
		{"exec plugin", kubeconfig(srv, "exec:\n  apiVersion: client.authentication.k8s.io/v1\n  command: aws"), "exec (credential plugin)"},
		{"auth provider", kubeconfig(srv, "auth-provider:\n  name: oidc"), "auth-provider"},
		{"basic auth", kubeconfig(srv, "username: admin\npassword: x"), "basic auth"},
		{"impersonation", kubeconfig(srv, "token: t\nas: someone"), "impersonation"},
		{"proxy-url", kubeconfig(srv+"\nproxy-url: socks5://proxy:1080", "token: t"), "proxy-url"},
		{"CA twice", kubeconfig(srv+"\ncertificate-authority: ca.crt\ncertificate-authority-data: "+b64(pki.certPEM), "token: t"), "both certificate-authority and certificate-authority-data"},
		{"CA file missing", kubeconfig(srv+"\ncertificate-authority: nope.crt", "token: t"), "nope.crt"},
		{"CA not PEM", kubeconfig(srv+"\ncertificate-authority-data: "+b64([]byte("junk")), "token: t"), "no PEM certificate"},
		{"CA and insecure", kubeconfig(srv+"\ninsecure-skip-tls-verify: true\ncertificate-authority-data: "+b64(pki.certPEM), "token: t"), "insecure-skip-tls-verify"},
		{"cert without key", kubeconfig(srv, "client-certificate-data: "+b64(pki.certPEM)), "no client-key"},
		{"cert file missing", kubeconfig(srv, "client-certificate: gone.crt\nclient-key: gone.key"), "gone.crt"},
		{"mismatched key", kubeconfig(srv, "client-certificate-data: "+b64(pki.certPEM)+"\nclient-key-data: "+b64(pki.otherKey)), "client certificate and key"},
		{"tokenFile missing", kubeconfig(srv, "tokenFile: /nonexistent/token"), "/nonexistent/token"},
		{"tokenFile empty", kubeconfig(srv, "tokenFile: empty-token"), "empty-token is empty"},
		{"no current context", []byte("apiVersion: v1\nkind: Config\nclusters: []\n"), "no current-context"},
		{"unknown context", []byte("current-context: x\ncontexts: []\n"), `current-context "x"`},
		{"unknown cluster", []byte("current-context: x\ncontexts: [{name: x, context: {cluster: gone}}]\n"), `cluster "gone"`},
		{"unknown user", []byte("current-context: x\ncontexts: [{name: x, context: {cluster: c, user: gone}}]\nclusters: [{name: c, cluster: {server: \"https://a\"}}]\n"), `user "gone"`},
		{"not YAML", []byte("\t{"), "decoding"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse(tc.kubeconfig, dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := Load(filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("missing file: %v", err)
	}
}
