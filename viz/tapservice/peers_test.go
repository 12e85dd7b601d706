package tapservice

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
)

// TestPeerCache: concurrent lookups of one address make one List, the
// answer (or its absence) is cached, and the pod's workload is named.
func TestPeerCache(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web-1", Namespace: "demo",
		Labels: map[string]string{"plexus.dev/workload-kind": "Deployment", "plexus.dev/workload-name": "web"}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7"}}
	kube := fake.NewSimpleClientset()
	var lists atomic.Int32
	kube.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		lists.Add(1)
		// Sleep: the List is slow on purpose, so the lookups overlap it.
		time.Sleep(50 * time.Millisecond)
		l := &corev1.PodList{}
		if a.(k8stesting.ListAction).GetListRestrictions().Fields.String() == "status.podIP=10.0.0.7" {
			l.Items = []corev1.Pod{*pod}
		}
		return true, l, nil
	})
	c := newPeerCache(kube, "cluster.local")
	var wg sync.WaitGroup
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := c.peer(context.Background(), "10.0.0.7:8080", "spiffe://x")
			if p.Pod != "web-1" || p.WorkloadName != "web" || p.Addr != "10.0.0.7:8080" || p.Identity != "spiffe://x" {
				t.Errorf("peer = %+v", p)
			}
		}()
	}
	wg.Wait()
	c.peer(context.Background(), "10.0.0.9", "")
	c.peer(context.Background(), "10.0.0.9", "")
	if n := lists.Load(); n != 2 {
		t.Errorf("%d pod lists for 11 lookups of one known and 2 of one unknown address, want 2", n)
	}
	if p := c.peer(context.Background(), "not-an-address", ""); p.Addr != "not-an-address" || p.Pod != "" {
		t.Errorf("peer of garbage = %+v", p)
	}
}

// TestPeerNamedByIdentity: a peer whose proven identity is not that of
// the pod at its address is named by its identity: another trust
// domain's (a linked cluster's, Cluster set), one relayed by a gateway
// pod, one from an address no pod here has. A pod's own identity keeps
// its workload.
func TestPeerNamedByIdentity(t *testing.T) {
	pod := func(name, ip, sa string, workload string) corev1.Pod {
		return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "demo",
			Labels: map[string]string{"plexus.dev/workload-kind": "Deployment", "plexus.dev/workload-name": workload}},
			Spec:   corev1.PodSpec{ServiceAccountName: sa},
			Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}
	}
	web := pod("web-1", "10.0.0.7", "web", "web")
	gateway := pod("gateway-1", "10.0.0.8", "plexus-gateway", "plexus-gateway")
	kube := fake.NewSimpleClientset(&web, &gateway)
	kube.PrependReactor("list", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		l := &corev1.PodList{}
		for _, p := range []corev1.Pod{web, gateway} {
			if a.(k8stesting.ListAction).GetListRestrictions().Fields.String() == "status.podIP="+p.Status.PodIP {
				l.Items = []corev1.Pod{p}
			}
		}
		return true, l, nil
	})
	c := newPeerCache(kube, "cluster.local")
	for _, tc := range []struct {
		addr, id string
		want     tapapi.Peer
	}{
		{"10.0.0.7:8080", "spiffe://cluster.local/ns/demo/sa/web",
			tapapi.Peer{Pod: "web-1", Namespace: "demo", WorkloadKind: "Deployment", WorkloadName: "web"}},
		{"10.0.0.7:8080", "spiffe://b.cluster.local/ns/demo/sa/web",
			tapapi.Peer{Cluster: "b.cluster.local", Namespace: "demo", WorkloadKind: "ServiceAccount", WorkloadName: "web"}},
		{"10.245.0.9:8080", "spiffe://b.cluster.local/ns/demo/sa/load",
			tapapi.Peer{Cluster: "b.cluster.local", Namespace: "demo", WorkloadKind: "ServiceAccount", WorkloadName: "load"}},
		{"10.0.0.8:4143", "spiffe://cluster.local/ns/demo/sa/load",
			tapapi.Peer{Namespace: "demo", WorkloadKind: "ServiceAccount", WorkloadName: "load"}},
		{"10.245.0.9:8080", "spiffe://cluster.local/ns/demo/sa/load",
			tapapi.Peer{Namespace: "demo", WorkloadKind: "ServiceAccount", WorkloadName: "load"}},
		{"10.0.0.8:4143", "", tapapi.Peer{Pod: "gateway-1", Namespace: "demo", WorkloadKind: "Deployment", WorkloadName: "plexus-gateway"}},
		{"10.245.0.9:8080", "", tapapi.Peer{}},
	} {
		got := c.peer(context.Background(), tc.addr, tc.id)
		tc.want.Addr, tc.want.Identity = tc.addr, tc.id
		if got != tc.want {
			t.Errorf("peer(%s, %q) = %+v, want %+v", tc.addr, tc.id, got, tc.want)
		}
	}
}
