package destination

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

const wait = 5 * time.Second

// webFixture: service web (port 80 → named target port "http", ClusterIP
// 10.96.0.10) with two slices whose "http" port resolves differently
// (8080 and 9090, as for pods of two versions), three pods: web-1 meshed
// with port 8080 opaque, web-2 not meshed, web-3 meshed but not ready.
func webFixture() []runtime.Object {
	owner := metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7f9c", Controller: ptr(true)}
	p1 := pod("ns", "web-1", "10.1.0.1", true, map[string]string{"config.plexus.dev/opaque-ports": "8080"})
	p1.Labels = map[string]string{"pod-template-hash": "7f9c"}
	p1.OwnerReferences = []metav1.OwnerReference{owner}
	return []runtime.Object{
		service("ns", "web", "10.96.0.10", svcPort("http", 80, intstr.FromString("http"))),
		endpointSlice("ns", "web-a", "web", discoveryv1.AddressTypeIPv4, "http", 8080,
			sliceEndpoint{"10.1.0.1", true, "web-1"}, sliceEndpoint{"10.1.0.3", false, "web-3"}),
		endpointSlice("ns", "web-b", "web", discoveryv1.AddressTypeIPv4, "http", 9090,
			sliceEndpoint{"10.1.0.2", true, "web-2"}),
		p1,
		pod("ns", "web-2", "10.1.0.2", false, nil),
		pod("ns", "web-3", "10.1.0.3", true, nil),
	}
}

func ptr[T any](v T) *T { return &v }

func TestResolveServiceByNameAndClusterIP(t *testing.T) {
	client := fake.NewClientset(webFixture()...)
	dst, reg := testServer(t, client, DefaultConfig())
	for _, path := range []string{"web.ns.svc.cluster.local:80", "WEB.ns.svc.cluster.local.:80", "10.96.0.10:80"} {
		s := open(t, dst.Get, path)
		u := s.expectUpdates(t, wait, "add[10.1.0.1:8080 10.1.0.2:9090]")[0]
		set := u.GetAdd()
		if set.MetricLabels["namespace"] != "ns" || set.MetricLabels["service"] != "web" {
			t.Errorf("%s: set labels %v", path, set.MetricLabels)
		}
		meshed, plain := set.Addrs[0], set.Addrs[1]
		if got := meshed.GetTlsIdentity().GetSpiffeId(); got != "spiffe://cluster.local/ns/ns/sa/web" {
			t.Errorf("%s: identity of the meshed pod %q", path, got)
		}
		if meshed.ProtocolHint.GetProtocol() != pb.ProtocolHint_OPAQUE || plain.ProtocolHint.GetProtocol() != pb.ProtocolHint_UNKNOWN {
			t.Errorf("%s: protocol hints %v, %v", path, meshed.ProtocolHint, plain.ProtocolHint)
		}
		if plain.TlsIdentity != nil {
			t.Errorf("%s: unmeshed pod has identity %v", path, plain.TlsIdentity)
		}
		wantLabels := map[string]string{"pod": "web-1", "owner_kind": "Deployment", "owner_name": "web", "serviceaccount": "web"}
		for k, v := range wantLabels {
			if meshed.MetricLabels[k] != v {
				t.Errorf("%s: label %s = %q, want %q (all: %v)", path, k, meshed.MetricLabels[k], v, meshed.MetricLabels)
			}
		}
		if _, ok := meshed.MetricLabels["zone"]; ok || meshed.Weight != Weight {
			t.Errorf("%s: empty zone label present or weight %d", path, meshed.Weight)
		}
		if c, ok := meshed.MetricLabels["cluster"]; ok {
			t.Errorf("%s: a local endpoint has the label cluster=%q", path, c)
		}
	}
	if got := metricValue(t, reg, "plexus_destination_streams", "get"); got != 3 {
		t.Errorf("plexus_destination_streams{rpc=get} = %v, want 3", got)
	}
}

func TestResolvePodIPAndUnknown(t *testing.T) {
	objs := append(webFixture(), runtime.Object(pod("ns", "host", "10.1.0.99", true, nil)))
	objs[len(objs)-1].(*corev1.Pod).Spec.HostNetwork = true
	client := fake.NewClientset(objs...)
	dst, _ := testServer(t, client, DefaultConfig())

	u := open(t, dst.Get, "10.1.0.3:7000").expectUpdates(t, wait, "add[10.1.0.3:7000]")[0]
	if a := u.GetAdd().Addrs[0]; a.GetTlsIdentity().GetSpiffeId() != "spiffe://cluster.local/ns/ns/sa/web" || a.MetricLabels["pod"] != "web-3" {
		t.Errorf("pod IP endpoint (not ready pods resolve too) = %v", a)
	}
	open(t, dst.Get, "10.1.0.99:80").expectUpdates(t, wait, "none(unknown)") // host network: not a pod IP
	open(t, dst.Get, "192.0.2.1:80").expectUpdates(t, wait, "none(unknown)") // nobody
	open(t, dst.Get, "10.96.0.10:81").expectUpdates(t, wait, "none(exists)") // service without that port
	open(t, dst.Get, "nope.ns.svc.cluster.local:80").expectUpdates(t, wait, "none(unknown)")

	// The pod follows: deleting it makes the stream say so.
	s := open(t, dst.Get, "10.1.0.2:9090")
	s.expectUpdates(t, wait, "add[10.1.0.2:9090]")
	if err := client.CoreV1().Pods("ns").Delete(context.Background(), "web-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, wait, "remove[10.1.0.2:9090]", "none(unknown)")
}

func TestResolveIPv6(t *testing.T) {
	client := fake.NewClientset(
		service("ns", "v6", "fd00:96::10", svcPort("", 80, intstr.FromInt32(8080))),
		endpointSlice("ns", "v6-a", "v6", discoveryv1.AddressTypeIPv6, "", 8080,
			sliceEndpoint{"fd00:1::1", true, ""}, sliceEndpoint{"fd00:1::2", true, ""}),
	)
	dst, _ := testServer(t, client, DefaultConfig())
	for _, path := range []string{"v6.ns.svc.cluster.local:80", "[fd00:96::10]:80"} {
		u := open(t, dst.Get, path).expectUpdates(t, wait, "add[[fd00:1::1]:8080 [fd00:1::2]:8080]")[0]
		if len(u.GetAdd().Addrs[0].Addr.Ip) != 16 {
			t.Errorf("%s: IPv6 address encoded in %d bytes", path, len(u.GetAdd().Addrs[0].Addr.Ip))
		}
	}
}

func TestBadPathIsInvalidArgument(t *testing.T) {
	dst, _ := testServer(t, fake.NewClientset(), DefaultConfig())
	for _, path := range []string{"web.ns.svc.cluster.local", "web.ns:80", "example.com:443", "10.0.0.1:0", "[fe80::1%eth0]:80", "a.b.c.svc.cluster.local:80"} {
		stream, err := dst.Get(context.Background(), &pb.GetDestination{Path: path})
		if err == nil {
			_, err = stream.Recv()
		}
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), path) {
			t.Errorf("Get(%q) = %v, want InvalidArgument naming the path", path, err)
		}
	}
}

func TestStreamFollowsChanges(t *testing.T) {
	client := fake.NewClientset(webFixture()...)
	dst, _ := testServer(t, client, DefaultConfig())
	ctx := context.Background()
	s := open(t, dst.Get, "web.ns.svc.cluster.local:80")
	s.expectUpdates(t, wait, "add[10.1.0.1:8080 10.1.0.2:9090]")

	// web-3 becomes ready.
	slice := webFixture()[1].(*discoveryv1.EndpointSlice)
	slice.Endpoints[1].Conditions.Ready = ptr(true)
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	u := s.expectUpdates(t, wait, "add[10.1.0.3:8080]")[0]
	if u.GetAdd().Addrs[0].ProtocolHint.GetProtocol() != pb.ProtocolHint_UNKNOWN {
		t.Errorf("web-3 has no opaque-ports, got hint %v", u.GetAdd().Addrs[0].ProtocolHint)
	}
	// web-1 becomes unready.
	slice.Endpoints[0].Conditions.Ready = ptr(false)
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, wait, "remove[10.1.0.1:8080]")
	// web-3's pod is deleted before its slice says so.
	if err := client.CoreV1().Pods("ns").Delete(ctx, "web-3", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, wait, "remove[10.1.0.3:8080]")
	// web-2's pod is relabelled: the endpoint's labels change, so it is re-added.
	p2, _ := client.CoreV1().Pods("ns").Get(ctx, "web-2", metav1.GetOptions{})
	p2.Spec.ServiceAccountName = "other"
	if _, err := client.CoreV1().Pods("ns").Update(ctx, p2, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if u := s.expectUpdates(t, wait, "add[10.1.0.2:9090]")[0]; u.GetAdd().Addrs[0].MetricLabels["serviceaccount"] != "other" {
		t.Errorf("re-added endpoint labels %v", u.GetAdd().Addrs[0].MetricLabels)
	}
	// Slice b deleted: the last endpoint goes.
	if err := client.DiscoveryV1().EndpointSlices("ns").Delete(ctx, "web-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, wait, "remove[10.1.0.2:9090]", "none(exists)")
	// Back, then the service is deleted.
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Create(ctx, webFixture()[2].(*discoveryv1.EndpointSlice), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, wait, "add[10.1.0.2:9090]")
	if err := client.CoreV1().Services("ns").Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, wait, "remove[10.1.0.2:9090]", "none(unknown)")
	s.quiet(t, 100*time.Millisecond)
}

func TestStreamForServiceCreatedLater(t *testing.T) {
	client := fake.NewClientset()
	dst, _ := testServer(t, client, DefaultConfig())
	ctx := context.Background()
	s := open(t, dst.Get, "late.ns.svc.cluster.local:80")
	s.expectUpdates(t, wait, "none(unknown)")
	if _, err := client.CoreV1().Services("ns").Create(ctx, service("ns", "late", "10.96.0.20", svcPort("", 80, intstr.FromInt32(80))), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, wait, "none(exists)")
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Create(ctx, endpointSlice("ns", "late-a", "late", discoveryv1.AddressTypeIPv4, "", 80, sliceEndpoint{"10.1.0.7", true, ""}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.expectUpdates(t, wait, "add[10.1.0.7:80]")
}

func TestGetProfile(t *testing.T) {
	client := fake.NewClientset(webFixture()...)
	dst, reg := testServer(t, client, DefaultConfig())
	ctx := context.Background()
	s := open(t, dst.GetProfile, "web.ns.svc.cluster.local:80")
	if p := s.next(t, wait); p.FullyQualifiedName != "web.ns.svc.cluster.local" || p.OpaqueProtocol || len(p.Routes) != 0 {
		t.Fatalf("first profile %v", p)
	}
	svc, _ := client.CoreV1().Services("ns").Get(ctx, "web", metav1.GetOptions{})
	svc.Annotations = map[string]string{"config.plexus.dev/opaque-ports": "80,443"}
	if _, err := client.CoreV1().Services("ns").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if p := s.next(t, wait); p.FullyQualifiedName != "web.ns.svc.cluster.local" || !p.OpaqueProtocol {
		t.Fatalf("profile after annotating port 80 opaque: %v", p)
	}
	// A slice change does not change the profile: nothing is sent.
	if err := client.DiscoveryV1().EndpointSlices("ns").Delete(ctx, "web-b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	s.quiet(t, 200*time.Millisecond)

	// Pod IP: the pod's annotation decides.
	if p := open(t, dst.GetProfile, "10.1.0.1:8080").next(t, wait); p.FullyQualifiedName != "" || !p.OpaqueProtocol {
		t.Errorf("pod IP profile %v", p)
	}
	if got := metricValue(t, reg, "plexus_destination_updates_total", "profile", "get_profile"); got != 3 {
		t.Errorf("profile updates counted %v, want 3", got)
	}
}

// A stream whose client reads nothing overflows, is ended with
// ResourceExhausted and is counted; another stream on the same service
// keeps getting every update.
func TestOverflowEndsStream(t *testing.T) {
	client := fake.NewClientset(webFixture()...)
	cfg := DefaultConfig()
	cfg.QueueSize = 2
	dst, reg := testServer(t, client, cfg)
	ctx := context.Background()

	ctxSlow, cancel := context.WithCancel(ctx)
	defer cancel()
	slow, err := dst.Get(ctxSlow, &pb.GetDestination{Path: "web.ns.svc.cluster.local:80"})
	if err != nil {
		t.Fatal(err)
	}
	fast := open(t, dst.Get, "web.ns.svc.cluster.local:80")
	fast.expectUpdates(t, wait, "add[10.1.0.1:8080 10.1.0.2:9090]")

	// Enough flips of web-3 to fill any transport buffering of the slow
	// stream's gRPC connection: each flip is one Add or Remove.
	slice := webFixture()[1].(*discoveryv1.EndpointSlice)
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; metricValue(t, reg, "plexus_destination_stream_overflow_total", "get") == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no overflow after %d flips", i)
		}
		slice.Endpoints[1].Conditions.Ready = ptr(i%2 == 0)
		if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			fast.expectUpdates(t, wait, "add[10.1.0.3:8080]")
		} else {
			fast.expectUpdates(t, wait, "remove[10.1.0.3:8080]")
		}
	}
	for {
		_, err := slow.Recv()
		if err == nil {
			continue // what was in flight before the overflow
		}
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("slow stream ended with %v, want ResourceExhausted", err)
		}
		break
	}
	// The overflowed stream is closed; the other keeps going.
	slice.Endpoints[0].Conditions.Ready = ptr(false)
	if _, err := client.DiscoveryV1().EndpointSlices("ns").Update(ctx, slice, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fast.expectUpdates(t, wait, "remove[10.1.0.1:8080]")
}
