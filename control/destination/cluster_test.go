package destination

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/util/retry"

	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestAgainstAPIServer runs the server on the informers of the local
// cluster's real kube-apiserver. The Service has no selector and the
// EndpointSlice is written by the test (managed-by plexus-test), so no
// controller touches them; the pods never run (no node matches their
// selector) and get their IPs by a status update.
func TestAgainstAPIServer(t *testing.T) {
	c := clustertest.Connect(t)
	ns := c.Namespace(t, "plexus-destination", nil)
	ctx := clustertest.Context(t, 2*time.Minute)
	core := c.Client.CoreV1()

	if _, err := core.ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "web"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	svc, err := core.Services(ns).Create(ctx, service(ns, "web", "", svcPort("http", 80, intstr.FromInt32(8080))), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []*corev1.Pod{pod(ns, "web-1", "10.250.0.1", true, nil), pod(ns, "web-2", "10.250.0.2", false, nil)} {
		st := p.Status
		p.Status = corev1.PodStatus{}
		created, err := core.Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
			// The scheduler writes the status too (PodScheduled=False).
			cur, err := core.Pods(ns).Get(ctx, created.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			cur.Status.Phase, cur.Status.PodIP, cur.Status.PodIPs = st.Phase, st.PodIP, st.PodIPs
			_, err = core.Pods(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatalf("setting pod IP of %s: %v", p.Name, err)
		}
	}
	slice := endpointSlice(ns, "web-a", "web", discoveryv1.AddressTypeIPv4, "http", 8080,
		sliceEndpoint{"10.250.0.1", true, "web-1"}, sliceEndpoint{"10.250.0.2", true, "web-2"})
	if slice, err = c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	dst, _ := testServer(t, c.Client, DefaultConfig())
	byName := open(t, dst.Get, "web."+ns+".svc.cluster.local:80")
	u := byName.expectUpdates(t, wait, "add[10.250.0.1:8080 10.250.0.2:8080]")[0]
	if id := u.GetAdd().Addrs[0].GetTlsIdentity().GetSpiffeId(); id != "spiffe://cluster.local/ns/"+ns+"/sa/web" {
		t.Errorf("identity of meshed web-1 = %q", id)
	}
	if u.GetAdd().Addrs[1].TlsIdentity != nil {
		t.Errorf("unmeshed web-2 has identity %v", u.GetAdd().Addrs[1].TlsIdentity)
	}
	byIP := open(t, dst.Get, svc.Spec.ClusterIP+":80")
	byIP.expectUpdates(t, wait, "add[10.250.0.1:8080 10.250.0.2:8080]")
	podIP := open(t, dst.Get, "10.250.0.2:8080")
	podIP.expectUpdates(t, wait, "add[10.250.0.2:8080]")

	// Deleting an endpoint reaches the stream within 1 s.
	slice.Endpoints = slice.Endpoints[:1]
	start := time.Now()
	if slice, err = c.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	byName.expectUpdates(t, time.Second, "remove[10.250.0.2:8080]")
	t.Logf("endpoint removal seen by the stream %v after the API write began", time.Since(start))
	byIP.expectUpdates(t, time.Second, "remove[10.250.0.2:8080]")

	// An endpoint turning unready and ready again.
	slice.Endpoints[0].Conditions.Ready = ptr(false)
	if slice, err = c.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	byName.expectUpdates(t, time.Second, "remove[10.250.0.1:8080]", "none(exists)")
	slice.Endpoints[0].Conditions.Ready = ptr(true)
	if _, err = c.Client.DiscoveryV1().EndpointSlices(ns).Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	byName.expectUpdates(t, time.Second, "add[10.250.0.1:8080]")

	// Deleting a pod removes its endpoint before the slice changes, and
	// ends a pod-IP stream's endpoint.
	if err := core.Pods(ns).Delete(ctx, "web-2", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	podIP.expectUpdates(t, time.Second, "remove[10.250.0.2:8080]", "none(unknown)")
	if err := core.Pods(ns).Delete(ctx, "web-1", metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	byName.expectUpdates(t, time.Second, "remove[10.250.0.1:8080]", "none(exists)")

	// Deleting the service: the stream learns it does not exist any more.
	if err := core.Services(ns).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	byName.expectUpdates(t, time.Second, "none(unknown)")
}
