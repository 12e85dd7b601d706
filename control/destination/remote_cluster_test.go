package destination

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestRemoteDiscoveryAgainstPair runs remote discovery on the two local
// clusters (make cluster-up CLUSTERS=2; make test's second up/down
// cycle): a server on cluster a's informers, given cluster b's admin
// kubeconfig in a credentials Secret, answers a mirror in a with the
// endpoints of the Service in b, and follows them as b's EndpointSlice
// changes, through b's real API server. (The slice is the test's, so no
// controller touches it and no pod is needed.)
func TestRemoteDiscoveryAgainstPair(t *testing.T) {
	a, b := clustertest.Pair(t)
	kubeconfigB, err := os.ReadFile(b.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	ctx := clustertest.Context(t, 2*time.Minute)
	ns := b.Namespace(t, "plexus-remote", nil)
	createNamespace(t, ctx, a, ns)
	createNamespace(t, ctx, a, mc.Namespace)

	if _, err := b.Client.CoreV1().Services(ns).Create(ctx, service(ns, "hello", "", svcPort("http", 80, intstr.FromInt32(8080))), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slices := b.Client.DiscoveryV1().EndpointSlices(ns)
	if _, err := slices.Create(ctx, endpointSlice(ns, "hello-1", "hello", discoveryv1.AddressTypeIPv4, "http", 8080,
		sliceEndpoint{"10.245.9.1", true, ""}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Client.CoreV1().Services(ns).Create(ctx, mirror(ns, "hello-b", "", "b", "hello"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	secret := linkSecret("b", string(kubeconfigB), "b.example")
	secret.Name = "cluster-credentials-b-" + ns
	if _, err := a.Client.CoreV1().Secrets(mc.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = a.Client.CoreV1().Secrets(mc.Namespace).Delete(context.Background(), secret.Name, metav1.DeleteOptions{})
	})

	client, _ := testServer(t, a.Client, DefaultConfig())
	s := open(t, client.Get, "hello-b."+ns+".svc.cluster.local:80")
	// none(exists) first if b's caches had not synced when the stream opened.
	if got := describe(s.next(t, 30*time.Second)); len(got) == 1 && got[0] == "none(exists)" {
		s.expectUpdates(t, 30*time.Second, "add[10.245.9.1:8080]")
	} else if len(got) != 1 || got[0] != "add[10.245.9.1:8080]" {
		t.Fatalf("first update %v, want add[10.245.9.1:8080]", got)
	}
	start := time.Now()
	if _, err := slices.Update(ctx, endpointSlice(ns, "hello-1", "hello", discoveryv1.AddressTypeIPv4, "http", 8080,
		sliceEndpoint{"10.245.9.1", true, ""}, sliceEndpoint{"10.245.9.2", true, ""}), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, 5*time.Second, "add[10.245.9.2:8080]")
	t.Logf("an endpoint added in cluster b reached cluster a's stream in %v", time.Since(start))
}

// createNamespace creates namespace name in c unless it exists, and
// deletes it when the test ends if it created it.
func createNamespace(t *testing.T, ctx context.Context, c *clustertest.Cluster, name string) {
	t.Helper()
	_, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	switch {
	case apierrors.IsAlreadyExists(err):
		return
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}
