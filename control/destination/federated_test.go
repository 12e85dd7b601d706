package destination

import (
	"context"
	"errors"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// TestFederatedServiceSpansMembers: hello-federated (as the service
// mirror writes it, spanning b) is answered with a's own hello endpoint
// and b's, each with its cluster's identity; b's member leaves when its
// API server fails its health checks (within interval + failures ×
// timeout) and when b stops exporting it as federated, and comes back
// with it; a's leaves when a stops exporting it.
func TestFederatedServiceSpansMembers(t *testing.T) {
	a, b, client, srv := remoteEnv(t)
	ctx := context.Background()
	setExport := func(c interface {
		Get(context.Context, string, metav1.GetOptions) (*corev1.Service, error)
		Update(context.Context, *corev1.Service, metav1.UpdateOptions) (*corev1.Service, error)
	}, mode string) {
		t.Helper()
		svc, err := c.Get(ctx, "hello", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Labels == nil {
			svc.Labels = map[string]string{}
		}
		svc.Labels[mc.ExportedLabel] = mode
		if _, err := c.Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	setExport(b.CoreV1().Services("shop"), mc.ExportedFederated)
	for _, obj := range []any{
		service("shop", "hello", "10.96.0.20", svcPort("http", 80, intstr.FromString("http"))),
		endpointSlice("shop", "hello-1", "hello", discoveryv1.AddressTypeIPv4, "http", 8080, sliceEndpoint{"10.244.0.5", true, "hello-a"}),
		pod("shop", "hello-a", "10.244.0.5", true, nil),
	} {
		var err error
		switch o := obj.(type) {
		case *corev1.Service:
			_, err = a.CoreV1().Services("shop").Create(ctx, o, metav1.CreateOptions{})
		case *discoveryv1.EndpointSlice:
			_, err = a.DiscoveryV1().EndpointSlices("shop").Create(ctx, o, metav1.CreateOptions{})
		case *corev1.Pod:
			_, err = a.CoreV1().Pods("shop").Create(ctx, o, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	setExport(a.CoreV1().Services("shop"), mc.ExportedFederated)
	fed := service("shop", "hello-federated", "10.96.0.60", svcPort("http", 80, intstr.FromInt32(80)))
	fed.Labels = map[string]string{mc.MirroredServiceLabel: "true", mc.FederatedLabel: "hello"}
	fed.Annotations = map[string]string{mc.FederatedClustersAnnotation: "b"}
	if _, err := a.CoreV1().Services("shop").Create(ctx, fed, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	s := open(t, client.Get, "hello-federated.shop.svc.cluster.local:80")
	adds := s.expectUpdates(t, wait, "add[10.244.0.5:8080 10.245.0.5:8080]")
	ids := map[string]string{}
	for _, wa := range adds[0].GetAdd().GetAddrs() {
		ip, _ := netip.AddrFromSlice(wa.GetAddr().GetIp())
		ids[netip.AddrPortFrom(ip, uint16(wa.GetAddr().GetPort())).String()] = wa.GetTlsIdentity().GetSpiffeId()
	}
	if ids["10.245.0.5:8080"] != "spiffe://b.example/ns/shop/sa/web" || ids["10.244.0.5:8080"] != "spiffe://cluster.local/ns/shop/sa/web" {
		t.Errorf("identities %v, want each member's cluster's", ids)
	}

	// b's API server stops answering: b's member is withdrawn.
	var down atomic.Bool
	srv.watcher.remote.mu.Lock()
	srv.watcher.remote.clusters["b"].ready = func(context.Context) error {
		if down.Load() {
			return errors.New("refused")
		}
		return nil
	}
	srv.watcher.remote.mu.Unlock()
	down.Store(true)
	start := time.Now()
	s.expectUpdates(t, wait, "remove[10.245.0.5:8080]")
	if d := time.Since(start); d > ProbeInterval*(ProbeFailures+1) {
		t.Errorf("a failing API server's member was withdrawn after %v", d)
	}
	down.Store(false)
	s.expectUpdates(t, wait, "add[10.245.0.5:8080]")

	setExport(b.CoreV1().Services("shop"), mc.ExportedRemoteDiscovery)
	s.expectUpdates(t, wait, "remove[10.245.0.5:8080]")
	setExport(b.CoreV1().Services("shop"), mc.ExportedFederated)
	s.expectUpdates(t, wait, "add[10.245.0.5:8080]")
	setExport(a.CoreV1().Services("shop"), "")
	s.expectUpdates(t, wait, "remove[10.244.0.5:8080]")
}
