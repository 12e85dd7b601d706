package destination

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/passthrough"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/tcptest"
)

// mirror is a remote-discovery mirror of cluster's Service remote, as the
// multicluster extension writes it.
func mirror(ns, name, clusterIP, cluster, remote string) *corev1.Service {
	svc := service(ns, name, clusterIP, svcPort("http", 80, intstr.FromInt32(80)))
	svc.Labels = map[string]string{mc.MirroredServiceLabel: "true", mc.RemoteDiscoveryLabel: cluster, mc.RemoteNameLabel: remote}
	return svc
}

// linkSecret is a linked cluster's Secret; kubeconfig names the fake
// client the test's newClient returns.
func linkSecret(cluster, kubeconfig, trustDomain string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: mc.Namespace, Name: "cluster-credentials-" + cluster,
			Labels:      map[string]string{mc.ClusterNameLabel: cluster},
			Annotations: map[string]string{mc.TrustDomainAnnotation: trustDomain}},
		Type: mc.CredentialsSecretType,
		Data: map[string][]byte{mc.CredentialsKey: []byte(kubeconfig)},
	}
}

// remoteEnv: cluster a with the extension's namespace and a mirror
// hello-b of cluster b's shop/hello; b (a fake client the Secret's
// kubeconfig "b" names) with hello's endpoint 10.245.0.5 (a meshed pod
// of service account web). It returns a's client, b's, and a client of
// the server once b's watcher has synced.
func remoteEnv(t *testing.T) (a, b *fake.Clientset, dst pb.DestinationClient, srv *Server) {
	t.Helper()
	b = fake.NewClientset(
		service("shop", "hello", "10.97.0.20", svcPort("http", 80, intstr.FromString("http"))),
		endpointSlice("shop", "hello-1", "hello", discoveryv1.AddressTypeIPv4, "http", 8080, sliceEndpoint{"10.245.0.5", true, "hello-1"}),
		pod("shop", "hello-1", "10.245.0.5", true, nil),
	)
	a = fake.NewClientset(
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mc.Namespace}},
		mirror("shop", "hello-b", "10.96.0.50", "b", "hello"),
		linkSecret("b", "b", "b.example"),
	)
	client, _ := testServerWith(t, a, DefaultConfig(), func(s *Server) {
		srv = s
		s.watcher.remote.newClient = func(kubeconfig []byte) (kubernetes.Interface, error) {
			if k := string(kubeconfig); k != "b" && k != "b-rotated" {
				return nil, fmt.Errorf("no cluster %q", kubeconfig)
			}
			return b, nil
		}
		s.watcher.remote.newReady = func([]byte) (func(context.Context) error, error) {
			return func(context.Context) error { return nil }, nil
		}
	})
	eventually.Within(t, wait, "cluster b's watcher synced", func() bool { return watcherOf(srv.watcher.remote, "b") != nil })
	return a, b, client, srv
}

// openMirror opens a stream of remoteEnv's mirror and reads its first
// update, the remote endpoint.
func openMirror(t *testing.T, client pb.DestinationClient) *recvStream[*pb.Update] {
	t.Helper()
	s := open(t, client.Get, "hello-b.shop.svc.cluster.local:80")
	s.expectUpdates(t, wait, "add[10.245.0.5:8080]")
	return s
}

// TestRemoteDiscoveryAnswersMirrorWithRemoteEndpoints: a mirror is
// answered with the linked cluster's pod addresses and identities (its
// trust domain) and the cluster's name (label cluster), under the
// mirror's name; a remote endpoint added is on
// the stream at once.
func TestRemoteDiscoveryAnswersMirrorWithRemoteEndpoints(t *testing.T) {
	_, b, client, _ := remoteEnv(t)
	s := open(t, client.Get, "hello-b.shop.svc.cluster.local:80")
	u := s.expectUpdates(t, wait, "add[10.245.0.5:8080]")[0].GetAdd()
	if got := u.Addrs[0].GetTlsIdentity().GetSpiffeId(); got != "spiffe://b.example/ns/shop/sa/web" {
		t.Errorf("remote endpoint's identity %q, want cluster b's trust domain", got)
	}
	if got := u.Addrs[0].MetricLabels["cluster"]; got != "b" {
		t.Errorf("remote endpoint's cluster label %q, want the Link's name b", got)
	}
	if u.MetricLabels["service"] != "hello-b" || u.MetricLabels["namespace"] != "shop" {
		t.Errorf("set labels %v, want the mirror's", u.MetricLabels)
	}
	ctx := context.Background()
	if _, err := b.CoreV1().Pods("shop").Create(ctx, pod("shop", "hello-2", "10.245.0.6", true, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := endpointSlice("shop", "hello-1", "hello", discoveryv1.AddressTypeIPv4, "http", 8080,
		sliceEndpoint{"10.245.0.5", true, "hello-1"}, sliceEndpoint{"10.245.0.6", true, "hello-2"})
	if _, err := b.DiscoveryV1().EndpointSlices("shop").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, wait, "add[10.245.0.6:8080]")
}

// TestRemoteDiscoveryDropsClusterWithItsSecret: deleting the linked
// cluster's Secret withdraws its endpoints (the mirror stays, with none);
// a Secret written again brings them back.
func TestRemoteDiscoveryDropsClusterWithItsSecret(t *testing.T) {
	a, _, client, _ := remoteEnv(t)
	s := openMirror(t, client)
	ctx := context.Background()
	secrets := a.CoreV1().Secrets(mc.Namespace)
	if err := secrets.Delete(ctx, "cluster-credentials-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, wait, "remove[10.245.0.5:8080]", "none(exists)")
	if _, err := secrets.Create(ctx, linkSecret("b", "b", "b.example"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, wait, "add[10.245.0.5:8080]")
}

// TestRemoteDiscoverySwapsWatcherInPlace: new credentials for a linked
// cluster (rotated) replace its watcher without a gap: the stream sees no
// update, as the endpoints are the same.
func TestRemoteDiscoverySwapsWatcherInPlace(t *testing.T) {
	a, _, client, srv := remoteEnv(t)
	s := openMirror(t, client)
	before := watcherOf(srv.watcher.remote, "b")
	ctx := context.Background()
	rotated := linkSecret("b", "b-rotated", "b.example")
	if _, err := a.CoreV1().Secrets(mc.Namespace).Update(ctx, rotated, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, wait, "cluster b's watcher replaced", func() bool { return watcherOf(srv.watcher.remote, "b") != before })
	s.quiet(t, 500*time.Millisecond)
}

// TestRemoteDiscoveryIgnoresOtherServices: a Service without the mirror
// labels is answered from the local cluster, even when a linked cluster
// has one of the same name; so is a mirror of a cluster nobody linked
// (no endpoints).
func TestRemoteDiscoveryIgnoresOtherServices(t *testing.T) {
	a, _, client, _ := remoteEnv(t)
	ctx := context.Background()
	if _, err := a.CoreV1().Services("shop").Create(ctx, service("shop", "hello", "10.96.0.51", svcPort("http", 80, intstr.FromString("http"))), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CoreV1().Services("shop").Create(ctx, mirror("shop", "hello-c", "10.96.0.52", "c", "hello"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	local := open(t, client.Get, "hello.shop.svc.cluster.local:80")
	local.expectUpdates(t, wait, "none(exists)")
	unlinked := open(t, client.Get, "hello-c.shop.svc.cluster.local:80")
	unlinked.expectUpdates(t, wait, "none(exists)")
	local.quiet(t, 200*time.Millisecond)
}

// watcherOf is cluster name's synced watcher, or nil.
func watcherOf(r *remoteClusters, name string) *watcher {
	w, _ := r.clusterOf(name)
	return w
}

// TestRemoteDiscoveryGatewayMode: a mirror in gateway mode is answered
// with the remote meshed endpoints, each through the linked cluster's
// gateway; a non-meshed one is left out (the gateway passes on nothing
// but a mesh handshake), and with no gateway known there is nothing to
// send to.
func TestRemoteDiscoveryGatewayMode(t *testing.T) {
	a, b, client, srv := remoteEnv(t)
	ctx := context.Background()
	gwMirror := mirror("shop", "hello-gw-b", "10.96.0.53", "b", "hello")
	gwMirror.Labels[mc.GatewayLabel] = "b"
	if _, err := a.CoreV1().Services("shop").Create(ctx, gwMirror, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CoreV1().Pods("shop").Create(ctx, pod("shop", "plain", "10.245.0.7", false, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := endpointSlice("shop", "hello-1", "hello", discoveryv1.AddressTypeIPv4, "http", 8080,
		sliceEndpoint{"10.245.0.5", true, "hello-1"}, sliceEndpoint{"10.245.0.7", true, "plain"})
	if _, err := b.DiscoveryV1().EndpointSlices("shop").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, wait, "the gateway mirror cached", func() bool {
		_, ok, _ := srv.watcher.services.GetIndexer().GetByKey("shop/hello-gw-b")
		return ok
	})
	s := open(t, client.Get, "hello-gw-b.shop.svc.cluster.local:80")
	s.expectUpdates(t, wait, "none(exists)")

	gw, gwClose := healthyGateway(t, "127.0.0.1:0")
	secret := linkSecret("b", "b", "b.example")
	secret.Annotations[mc.GatewayAddressAnnotation] = gw.String()
	if _, err := a.CoreV1().Secrets(mc.Namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	u := s.expectUpdates(t, wait, "add[10.245.0.5:8080]")[0].GetAdd()
	if got := u.Addrs[0].GetVia(); got == nil || fmt.Sprintf("%v:%d", got.GetIp(), got.GetPort()) != fmt.Sprintf("%v:%d", []byte{127, 0, 0, 1}, gw.Port()) {
		t.Errorf("via %v, want the gateway %v", got, gw)
	}
	if got := u.Addrs[0].GetTlsIdentity().GetSpiffeId(); got != "spiffe://b.example/ns/shop/sa/web" {
		t.Errorf("identity %q, want the remote pod's own", got)
	}
	// The gateway goes away: its endpoints are withdrawn within
	// interval + failures × (refused at once); it comes back: restored.
	gwClose()
	start := time.Now()
	s.expectUpdates(t, wait, "remove[10.245.0.5:8080]", "none(exists)")
	if d := time.Since(start); d > ProbeInterval*(ProbeFailures+1) {
		t.Errorf("a refusing gateway was withdrawn after %v", d)
	}
	healthyGateway(t, gw.String())
	s.expectUpdates(t, wait, "add[10.245.0.5:8080]")

	// The flat mirror of the same Service still reaches both pods directly.
	flat := open(t, client.Get, "hello-b.shop.svc.cluster.local:80")
	for _, add := range flat.expectUpdates(t, wait, "add[10.245.0.5:8080 10.245.0.7:8080]") {
		for _, wa := range add.GetAdd().GetAddrs() {
			if wa.GetVia() != nil {
				t.Errorf("flat mirror's endpoint %v has a gateway", wa.GetAddr())
			}
		}
	}
}

// healthyGateway answers multicluster health checks on addr (loopback)
// as a ready gateway does, until the test ends or close is called.
func healthyGateway(t *testing.T, addr string) (gw netip.AddrPort, close func()) {
	t.Helper()
	return tcptest.Serve(t, addr, func(c net.Conn) { _, _ = passthrough.Accept(c, time.Second) })
}

// TestRemoteDiscoveryAnswersRemotePodIP: an address no local pod has, a
// linked cluster's pod has, and a headless mirror's slice lists (what the
// mirror's DNS names resolve to) is answered with that pod and its
// identity in the linked cluster's trust domain; before the slice lists
// it, it is not (a linked cluster cannot claim addresses); a remote pod
// that comes later at a listed address is followed.
func TestRemoteDiscoveryAnswersRemotePodIP(t *testing.T) {
	a, b, client, _ := remoteEnv(t)
	ctx := context.Background()
	s := open(t, client.Get, "10.245.0.5:8080")
	s.expectUpdates(t, wait, "none(unknown)")

	mirrorSlice := endpointSlice("shop", "db-b", "db-b", discoveryv1.AddressTypeIPv4, "http", 8080,
		sliceEndpoint{"10.245.0.5", true, ""}, sliceEndpoint{"10.245.0.9", true, ""})
	mirrorSlice.Labels[discoveryv1.LabelManagedBy] = mc.MirrorSliceManager
	mirrorSlice.Labels[mc.ClusterNameLabel] = "b"
	if _, err := a.DiscoveryV1().EndpointSlices("shop").Create(ctx, mirrorSlice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	u := s.expectUpdates(t, wait, "add[10.245.0.5:8080]")[0].GetAdd()
	if got := u.Addrs[0].GetTlsIdentity().GetSpiffeId(); got != "spiffe://b.example/ns/shop/sa/web" {
		t.Errorf("remote pod's identity %q, want cluster b's trust domain", got)
	}
	later := open(t, client.Get, "10.245.0.9:8080")
	later.expectUpdates(t, wait, "none(unknown)")
	if _, err := b.CoreV1().Pods("shop").Create(ctx, pod("shop", "hello-9", "10.245.0.9", true, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	later.expectUpdates(t, wait, "add[10.245.0.9:8080]")
	// A remote pod at an address no mirror lists stays unknown.
	other := open(t, client.Get, "10.245.0.10:8080")
	if _, err := b.CoreV1().Pods("shop").Create(ctx, pod("shop", "hello-10", "10.245.0.10", true, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other.expectUpdates(t, wait, "none(unknown)")
	other.quiet(t, 300*time.Millisecond)
}
