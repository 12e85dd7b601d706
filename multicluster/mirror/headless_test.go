package mirror

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// TestHeadlessMirror (T9, flat mode): a headless Service's mirror is
// headless, with one EndpointSlice, owned by it, listing the remote
// endpoints at their addresses with their hostnames (db-0, db-1): what
// the cluster's DNS serves as db-0.db-b.shop.svc. A remote endpoint going
// is followed; a controller started anew rewrites nothing.
func TestHeadlessMirror(t *testing.T) {
	a, b := pairEnv(t)
	ctx := context.Background()
	port, name := int32(8080), "tcp"
	if _, err := b.core.CoreV1().Services("shop").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db", Labels: map[string]string{mc.ExportedLabel: mc.ExportedRemoteDiscovery}},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{"app": "db"},
			Ports: []corev1.ServicePort{{Name: name, Port: port}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := true
	ep := func(ip, host string) discoveryv1.Endpoint {
		return discoveryv1.Endpoint{Addresses: []string{ip}, Hostname: &host, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
	}
	remote := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "db-x1", Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{ep("10.245.0.10", "db-0"), ep("10.245.0.11", "db-1")},
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port}},
	}
	remote, err := b.core.DiscoveryV1().EndpointSlices("shop").Create(ctx, remote, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hosts := func() string {
		s, err := a.core.DiscoveryV1().EndpointSlices("shop").Get(ctx, "db-b", metav1.GetOptions{})
		if err != nil {
			return err.Error()
		}
		out := ""
		for _, e := range s.Endpoints {
			out += *e.Hostname + "=" + e.Addresses[0] + " "
		}
		return out
	}
	within(t, "headless mirror db-b with db-0 and db-1", func() bool { return hosts() == "db-0=10.245.0.10 db-1=10.245.0.11 " })
	m, err := a.core.CoreV1().Services("shop").Get(ctx, "db-b", metav1.GetOptions{})
	if err != nil || m.Spec.ClusterIP != corev1.ClusterIPNone {
		t.Fatalf("mirror db-b %+v %v: want headless", m.Spec, err)
	}
	s, err := a.core.DiscoveryV1().EndpointSlices("shop").Get(ctx, "db-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.OwnerReferences) != 1 || s.OwnerReferences[0].UID != m.UID || s.Labels[discoveryv1.LabelServiceName] != "db-b" || s.Labels[discoveryv1.LabelManagedBy] != mc.MirrorSliceManager {
		t.Errorf("slice %+v: want owned by the mirror, of its service, managed by the service mirror", s.ObjectMeta)
	}

	remote.Endpoints = remote.Endpoints[:1]
	if _, err := b.core.DiscoveryV1().EndpointSlices("shop").Update(ctx, remote, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	within(t, "db-1 gone from the mirror's slice", func() bool { return hosts() == "db-0=10.245.0.10 " })

	// A second controller, as after a restart, finds everything in order.
	before, err := a.core.DiscoveryV1().EndpointSlices("shop").Get(ctx, "db-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(a.core, a.dyn, mc.Namespace, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	within(t, "the second controller's watch synced", func() bool { r := c.remoteOf("b"); return r != nil && r.synced() })
	time.Sleep(time.Second) // its syncs of the Link and of db
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after, err := a.core.DiscoveryV1().EndpointSlices("shop").Get(ctx, "db-b", metav1.GetOptions{})
	if err != nil || after.UID != before.UID || after.ResourceVersion != before.ResourceVersion {
		t.Errorf("a new controller rewrote the slice: %v (rv %s → %s)", err, before.ResourceVersion, after.ResourceVersion)
	}
	if m2, err := a.core.CoreV1().Services("shop").Get(ctx, "db-b", metav1.GetOptions{}); err != nil || m2.UID != m.UID {
		t.Errorf("a new controller replaced the mirror: %v", err)
	}
}
