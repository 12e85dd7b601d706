// Package apiservertest starts a throwaway etcd and kube-apiserver on
// loopback for tests that need a real API server (RBAC, admission, patch
// semantics), from the binaries the local cluster build caches.
package apiservertest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/daemonset/plugininstall"
)

// Server is a real etcd + kube-apiserver on loopback, owned by one test
// and stopped by its cleanup. Authorization is RBAC; three static tokens
// authenticate an admin (system:masters), AgentUser and a user with no
// bindings.
type Server struct {
	URL string
	// CAFile verifies the server's self-signed certificate (written by
	// kube-apiserver into its --cert-dir once it serves).
	CAFile string

	bin, dir string // the binaries; the server's files and logs
}

// Static tokens and the agent's user name.
const (
	AdminToken  = "admin-token"
	AgentToken  = "agent-token"
	AgentUser   = "plexus-test-agent"
	NobodyToken = "nobody-token"
)

func kubeBin(t testing.TB) string {
	t.Helper()
	if d := os.Getenv("PLEXUS_KUBE_BIN"); d != "" {
		return d
	}
	home, _ := os.UserHomeDir()
	matches, _ := filepath.Glob(filepath.Join(home, ".cache/plexus/kube/*/bin/kube-apiserver"))
	if len(matches) == 0 {
		t.Skip("no kube-apiserver: set PLEXUS_KUBE_BIN or run `make deps`")
	}
	return filepath.Dir(matches[len(matches)-1])
}

// freePorts returns n distinct free loopback ports: each is held until all
// are chosen (closed one at a time, the kernel can hand out the same port
// twice; a CI run gave etcd's peer port to the API server too).
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		ports[i] = ln.Addr().(*net.TCPAddr).Port
	}
	return ports
}

func startProc(t testing.TB, dir, name string, bin string, args ...string) {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, name+".log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			if len(b) > 4000 {
				b = b[len(b)-4000:]
			}
			t.Logf("%s log tail:\n%s", name, b)
		}
	})
}

// Start runs etcd and kube-apiserver and waits until /readyz is ok. It
// skips the test in -short mode or when the binaries are not found
// (PLEXUS_KUBE_BIN, else ~/.cache/plexus/kube/*/bin).
func Start(t testing.TB) *Server {
	t.Helper()
	if testing.Short() {
		t.Skip("starts etcd and kube-apiserver")
	}
	bin := kubeBin(t)
	dir := t.TempDir()
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	der := x509.MarshalPKCS1PrivateKey(key)
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	saKey := write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: der}))
	saPub := write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
	tokens := write("tokens.csv", []byte(fmt.Sprintf("%s,admin,admin,system:masters\n%s,%s,agent\n%s,nobody,nobody\n", AdminToken, AgentToken, AgentUser, NobodyToken)))

	ports := freePorts(t, 3)
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	startProc(t, dir, "etcd", filepath.Join(bin, "etcd"),
		"--data-dir", filepath.Join(dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-advertise-peer-urls", fmt.Sprintf("http://127.0.0.1:%d", peerPort),
		"--initial-cluster", fmt.Sprintf("default=http://127.0.0.1:%d", peerPort))
	startProc(t, dir, "kube-apiserver", filepath.Join(bin, "kube-apiserver"),
		"--etcd-servers", etcdURL,
		"--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(apiPort),
		"--cert-dir", filepath.Join(dir, "certs"),
		"--authorization-mode", "RBAC", "--anonymous-auth=false",
		"--token-auth-file", tokens,
		"--service-cluster-ip-range", "10.96.0.0/16",
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", saPub, "--service-account-signing-key-file", saKey,
		"--profiling=false")
	a := &Server{URL: fmt.Sprintf("https://127.0.0.1:%d", apiPort), CAFile: filepath.Join(dir, "certs", "apiserver.crt"), bin: bin, dir: dir}
	admin := a.Client(t, AdminToken)
	deadline := time.Now().Add(90 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		body, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if err == nil && strings.TrimSpace(string(body)) == "ok" {
			return a
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-apiserver not ready after 90s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Config is the client configuration authenticating with token.
func (a *Server) Config(token string) *rest.Config {
	return &rest.Config{
		Host:            a.URL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}, // self-signed, loopback, test-only
	}
}

// Client is a clientset authenticating with token.
func (a *Server) Client(t testing.TB, token string) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(a.Config(token))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// PluginKubeconfig writes the kubeconfig the node agent gives plexus-cni
// (daemonset/plugininstall: the CA embedded, the token in a file beside it),
// here for token, and returns its path.
func (a *Server) PluginKubeconfig(t testing.TB, token string) string {
	t.Helper()
	dir := t.TempDir()
	ca, err := os.ReadFile(a.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(dir, plugininstall.TokenFile)
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kc, err := plugininstall.Kubeconfig(a.URL, ca, tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, plugininstall.KubeconfigFile)
	if err := os.WriteFile(path, kc, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Namespace creates a namespace with the default service account that
// admission requires of pods (no controller-manager runs here to create it).
func (a *Server) Namespace(t testing.TB, name string) {
	t.Helper()
	admin := a.Client(t, AdminToken)
	ctx := context.Background()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
