// Package multicluster tests the multicluster extension on the two local
// clusters (make cluster-up CLUSTERS=2; make test's second up/down cycle).
package multicluster

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// TestServiceMirrorOnPair (issue 27's T1 on real clusters): the extension
// applied to both clusters (kubectl apply -k deploy/plexus-multicluster),
// its service mirror running in a, linked to b with credentials minted by
// b's TokenRequest API for the remote-access service account (read-only),
// over the flat network: exporting a Service in b creates its mirror in a
// and the Link says Ready; un-exporting deletes it; deleting the Link
// deletes every mirror and the Link itself goes, each within 5 s.
func TestServiceMirrorOnPair(t *testing.T) {
	a, b := clustertest.Pair(t)
	mode := clustertest.PairMode(t, "flat")
	t.Cleanup(func() { clustertest.PairMode(t, mode) })
	ctx := clustertest.Context(t, 5*time.Minute)
	kustomization := filepath.Join(clustertest.RepoRoot(), "deploy", "plexus-multicluster")
	for _, c := range []*clustertest.Cluster{a, b} {
		// Plexus is not installed here; the extension's Role for the
		// trust anchors needs its namespace.
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plexus-system"}}, metav1.CreateOptions{}); err == nil {
			t.Cleanup(func() { _ = c.Client.CoreV1().Namespaces().Delete(context.Background(), "plexus-system", metav1.DeleteOptions{}) })
		} else if !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		c.Kubectl(t, "apply", "-k", kustomization)
		t.Cleanup(func() {
			// The CRD last: its Links' finalizer needs the controller.
			_, _ = c.TryKubectl("delete", "links.multicluster.plexus.dev", "--all", "-n", mc.Namespace, "--timeout=30s")
			_, _ = c.TryKubectl("delete", "-k", kustomization, "--ignore-not-found", "--timeout=60s")
		})
	}
	a.WaitDeploymentReady(t, mc.Namespace, "plexus-service-mirror", 2*time.Minute)

	// The credentials: a token of b's remote-access account, and b's CA.
	tok, err := b.Client.CoreV1().ServiceAccounts(mc.Namespace).CreateToken(ctx, "plexus-mc-remote-access",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("TokenRequest in b: %v", err)
	}
	kubeconfig := remoteKubeconfig(t, b, tok.Status.Token)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: "cluster-credentials-b"},
		Type: mc.CredentialsSecretType, Data: map[string][]byte{mc.CredentialsKey: kubeconfig}}
	if _, err := a.Client.CoreV1().Secrets(mc.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	links := dynamic.NewForConfigOrDie(a.Config).Resource(mc.LinkResource).Namespace(mc.Namespace)
	link := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"clusterName": "b", "credentialsSecret": secret.Name}}}
	link.SetAPIVersion(mc.APIVersion)
	link.SetKind(mc.LinkKind)
	link.SetName("b")
	if _, err := links.Create(ctx, link, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	ns := b.Namespace(t, "mc-mirror", nil)
	if _, err := a.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = a.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{}) })
	hello := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "hello", Labels: map[string]string{mc.ExportedLabel: mc.ExportedRemoteDiscovery}},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "hello"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}}}}
	if hello, err = b.Client.CoreV1().Services(ns).Create(ctx, hello, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mirrored := func() bool {
		svc, err := a.Client.CoreV1().Services(ns).Get(ctx, "hello-b", metav1.GetOptions{})
		return err == nil && svc.Labels[mc.RemoteDiscoveryLabel] == "b" && svc.Labels[mc.RemoteNameLabel] == "hello" && len(svc.Spec.Ports) == 1
	}
	gone := func() bool {
		_, err := a.Client.CoreV1().Services(ns).Get(ctx, "hello-b", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	// The first mirror waits for the Link's first sync of b.
	timed(t, "export: mirror hello-b in a (first sync included)", 30*time.Second, mirrored)
	timed(t, "Link b Ready", 10*time.Second, func() bool {
		u, err := links.Get(ctx, "b", metav1.GetOptions{})
		if err != nil {
			return false
		}
		l, err := mc.DecodeLink(u)
		if err != nil {
			return false
		}
		for _, c := range l.Status.Conditions {
			if c.Type == mc.ConditionReady {
				return c.Status == metav1.ConditionTrue
			}
		}
		return false
	})

	delete(hello.Labels, mc.ExportedLabel)
	if hello, err = b.Client.CoreV1().Services(ns).Update(ctx, hello, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	timed(t, "un-export: mirror hello-b deleted", 5*time.Second, gone)

	hello.Labels = map[string]string{mc.ExportedLabel: mc.ExportedRemoteDiscovery}
	if _, err = b.Client.CoreV1().Services(ns).Update(ctx, hello, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	timed(t, "export again: mirror hello-b in a", 5*time.Second, mirrored)
	if err := links.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	timed(t, "Link deleted: mirror hello-b deleted", 5*time.Second, gone)
	timed(t, "Link deleted: the Link gone", 5*time.Second, func() bool {
		_, err := links.Get(ctx, "b", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// remoteKubeconfig is a kubeconfig for b's API server as a's pods reach
// it, with b's CA (read from b's admin kubeconfig) and token.
func remoteKubeconfig(t *testing.T, b *clustertest.Cluster, token string) []byte {
	t.Helper()
	admin, err := clientcmd.LoadFromFile(b.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	var ca []byte
	for _, c := range admin.Clusters {
		if ca, err = os.ReadFile(c.CertificateAuthority); err != nil {
			t.Fatal(err)
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["b"] = &clientcmdapi.Cluster{Server: "https://" + clustertest.BAPIServer, CertificateAuthorityData: ca}
	cfg.AuthInfos["link"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["b"] = &clientcmdapi.Context{Cluster: "b", AuthInfo: "link"}
	cfg.CurrentContext = "b"
	out, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// timed fails the test unless cond holds within d, and logs how long it
// took.
func timed(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	start := time.Now()
	if !eventually.Holds(d, cond) {
		t.Fatalf("%s: not within %v", what, d)
	}
	t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
}

func ptr[T any](v T) *T { return &v }
