// Package identitytest provides what tests of the identity service and its
// clients share: a fake clientset whose TokenReviews a test controls, and a
// real kube-apiserver (the local cluster, or a throwaway one) with
// service-account tokens from the TokenRequest API.
package identitytest

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// Tokens is a fake token authority: what a TokenReview answers for each
// token; unknown tokens are not authenticated. It records the audiences
// each review asked for.
type Tokens struct {
	mu        sync.Mutex
	answers   map[string]Answer
	audiences [][]string
}

// Answer is the fake TokenReview result for one token: a status, or an
// error from the API call itself.
type Answer struct {
	Status authnv1.TokenReviewStatus
	Err    error
}

// ServiceAccount is the Answer for a valid token of ns/sa with audiences.
func ServiceAccount(ns, sa string, audiences ...string) Answer {
	return Answer{Status: authnv1.TokenReviewStatus{Authenticated: true, Audiences: audiences,
		User: authnv1.UserInfo{Username: "system:serviceaccount:" + ns + ":" + sa}}}
}

// NewTokens returns a fake token authority answering from answers.
func NewTokens(answers map[string]Answer) *Tokens {
	return &Tokens{answers: answers}
}

// Set changes the answer for token.
func (a *Tokens) Set(token string, ans Answer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.answers[token] = ans
}

// Audiences returns the audiences of every review so far.
func (a *Tokens) Audiences() [][]string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([][]string(nil), a.audiences...)
}

func (a *Tokens) react(action k8stesting.Action) (bool, runtime.Object, error) {
	tr := action.(k8stesting.CreateAction).GetObject().(*authnv1.TokenReview).DeepCopy()
	a.mu.Lock()
	defer a.mu.Unlock()
	a.audiences = append(a.audiences, tr.Spec.Audiences)
	ans, ok := a.answers[tr.Spec.Token]
	if !ok {
		ans = Answer{Status: authnv1.TokenReviewStatus{Error: "invalid bearer token"}}
	}
	if ans.Err != nil {
		return true, nil, ans.Err
	}
	tr.Status = ans.Status
	return true, tr, nil
}

// FakeClient is a fake clientset holding objs whose TokenReviews tokens answers.
func FakeClient(tokens *Tokens, objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	c.PrependReactor("create", "tokenreviews", tokens.react)
	return c
}

// Log is a logger writing to the test log with -v, else nowhere.
func Log(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// Kube is a real kube-apiserver with an admin client.
type Kube struct {
	Admin  kubernetes.Interface
	Config *rest.Config // admin
	// Local is true for the local cluster of $PLEXUS_TEST_KUBECONFIG,
	// false for a throwaway API server without controllers.
	Local   bool
	cluster *clustertest.Cluster
}

// RealAPIServer returns the local cluster when $PLEXUS_TEST_KUBECONFIG is
// set; otherwise a throwaway etcd + kube-apiserver from the cached
// binaries (skipping the test when there are none, or in -short mode).
func RealAPIServer(t *testing.T) *Kube {
	t.Helper()
	if os.Getenv(clustertest.EnvKubeconfig) != "" {
		c := clustertest.Connect(t)
		return &Kube{Admin: c.Client, Config: c.Config, Local: true, cluster: c}
	}
	s := apiservertest.Start(t)
	cfg := &rest.Config{Host: s.URL, BearerToken: apiservertest.AdminToken,
		TLSClientConfig: rest.TLSClientConfig{Insecure: true}} // self-signed, loopback, test-only
	return &Kube{Admin: s.Client(t, apiservertest.AdminToken), Config: cfg}
}

// Namespace creates a throwaway namespace, deleted when the test ends.
func (k *Kube) Namespace(t *testing.T, prefix string) string {
	t.Helper()
	if k.cluster != nil {
		return k.cluster.Namespace(t, prefix, nil)
	}
	ns, err := k.Admin.CoreV1().Namespaces().Create(context.Background(),
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return ns.Name // the API server is thrown away with the test
}

// ServiceAccount creates ns/name and returns a token for it from the
// TokenRequest API, valid for audiences (none: the API server's own).
func (k *Kube) ServiceAccount(t *testing.T, ns, name string, audiences ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := k.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatal(err)
	}
	return k.Token(t, ns, name, audiences...)
}

// Token returns a fresh token of ns/sa for audiences.
func (k *Kube) Token(t *testing.T, ns, sa string, audiences ...string) string {
	t.Helper()
	ttl := int64(600)
	tr, err := k.Admin.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), sa, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: audiences, ExpirationSeconds: &ttl},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest for %s/%s: %v", ns, sa, err)
	}
	return tr.Status.Token
}

// As returns a client authenticating with token (and nothing else).
func (k *Kube) As(t *testing.T, token string) kubernetes.Interface {
	t.Helper()
	cfg := rest.AnonymousClientConfig(k.Config)
	cfg.BearerToken = token
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TokenFile writes token to a file in a test directory and returns its path.
func TokenFile(t testing.TB, token string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(p, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Listen returns a listener on a free loopback port.
func Listen(t testing.TB) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// Run runs each function in its own goroutine until stop is called or the
// test ends; stop cancels their context and waits for all of them. An
// error returned before stop fails the test.
func Run(t testing.TB, fns ...func(context.Context) error) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, fn := range fns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(ctx); err != nil && ctx.Err() == nil {
				t.Errorf("background function failed: %v", err)
			}
		}()
	}
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// Eventually polls cond every 20ms until it returns nil, failing the test
// with cond's last error after timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s: %v", what, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kubeconfig writes a kubeconfig for the API server that authenticates
// with token, and returns its path.
func (k *Kube) Kubeconfig(t testing.TB, token string) string {
	t.Helper()
	cluster := clientcmdapi.NewCluster()
	cluster.Server = k.Config.Host
	cluster.CertificateAuthority = k.Config.CAFile
	cluster.CertificateAuthorityData = k.Config.CAData
	cluster.InsecureSkipTLSVerify = k.Config.Insecure
	user := clientcmdapi.NewAuthInfo()
	user.Token = token
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = cluster
	cfg.AuthInfos["test"] = user
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	cfg.CurrentContext = "test"
	p := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, p); err != nil {
		t.Fatal(err)
	}
	return p
}

// GrantIdentityRBAC gives ns/sa exactly what the identity service needs:
// create TokenReviews (cluster-wide), get, list and watch its issuer
// Secret (by name) in ns, and get the declarations (by name) of the
// reserved namespaces given. deploy/ should grant the same.
func (k *Kube) GrantIdentityRBAC(t *testing.T, ns, sa, secret string, declarations ...string) {
	t.Helper()
	ctx := context.Background()
	rbac := k.Admin.RbacV1()
	subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: sa, Namespace: ns}}
	cr, err := rbac.ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "plexus-identity-test-" + ns},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rbac.ClusterRoles().Delete(context.Background(), cr.Name, metav1.DeleteOptions{}) })
	crb, err := rbac.ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: cr.Name},
		Subjects:   subject,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rbac.ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{}) })
	if _, err := rbac.Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "plexus-identity"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: []string{"get", "list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: append([]string{"none"}, declarations...), Verbs: []string{"get"}},
		},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := rbac.RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "plexus-identity"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "plexus-identity"},
		Subjects:   subject,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
