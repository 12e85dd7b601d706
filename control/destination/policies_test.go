package destination

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/proto"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gwfake "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/fake"
	gatewayclient "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned/typed/apis/v1"

	"github.com/plexus-mesh/plexus/control/serviceprofile"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// routeCluster is a fake cluster with routes: the core clientset (its
// discovery serving the route and profile CRDs when crds is set), the
// Gateway API clientset and the dynamic client for ServiceProfiles.
type routeCluster struct {
	core *fake.Clientset
	gw   *gwfake.Clientset
	dyn  *dynfake.FakeDynamicClient
	reg  *prometheus.Registry
	dst  pb.DestinationClient
	// dial opens another connection to the server.
	dial func(credentials.TransportCredentials) pb.DestinationClient
}

// startRouteCluster runs a Server watching routes on a fake cluster
// holding objs (core objects, routes, *serviceprofile.ServiceProfile)
// over an in-memory gRPC connection, until the test ends.
func startRouteCluster(t testing.TB, crds bool, objs ...any) *routeCluster {
	t.Helper()
	return startRouteClusterLogging(t, io.Discard, crds, objs...)
}

// startRouteClusterLogging is startRouteCluster with the server's log
// written to logTo (and to the test's log with -v).
func startRouteClusterLogging(t testing.TB, logTo io.Writer, crds bool, objs ...any) *routeCluster {
	t.Helper()
	return startCluster(t, clusterOptions{logTo: logTo, crds: crds}, objs...)
}

// clusterOptions configure startCluster.
type clusterOptions struct {
	logTo io.Writer // nil: discarded
	// crds: discovery serves the route, profile and policy CRDs.
	crds bool
	// inbound: the server watches inbound policies (WatchInbound).
	inbound bool
	// cfg, when set, replaces DefaultConfig().
	cfg *Config
	// serverCreds and clientCreds, when set, secure the connection.
	serverCreds, clientCreds credentials.TransportCredentials
	// callers: the gRPC server has the server's StreamInterceptor.
	callers bool
	// peerAddr, when set, is the address connections come from (else
	// bufconn's, which is no IP address).
	peerAddr net.Addr
}

// startCluster runs a Server watching routes (and, with o.inbound,
// inbound policies) on a fake cluster holding objs (core objects,
// routes, *serviceprofile.ServiceProfile, policy.plexus.dev objects)
// over an in-memory gRPC connection, until the test ends.
func startCluster(t testing.TB, o clusterOptions, objs ...any) *routeCluster {
	t.Helper()
	c := fakeCluster(t, o.crds, objs...)
	c.serve(t, o)
	return c
}

// fakeCluster is the fake clientsets holding objs, with no server yet.
func fakeCluster(t testing.TB, crds bool, objs ...any) *routeCluster {
	t.Helper()
	var core, gw, dyn []runtime.Object
	for _, obj := range objs {
		switch obj := obj.(type) {
		case *gatewayv1.HTTPRoute, *gatewayv1.GRPCRoute:
			gw = append(gw, obj.(runtime.Object))
		case *serviceprofile.ServiceProfile:
			dyn = append(dyn, toUnstructured(t, obj))
		case runtime.Object:
			core = append(core, obj)
		default:
			if u, ok := policyObject(t, obj); ok {
				dyn = append(dyn, u)
				continue
			}
			t.Fatalf("unexpected fixture object %T", obj)
		}
	}
	listKinds := map[schema.GroupVersionResource]string{serviceprofile.GroupVersionResource: "ServiceProfileList"}
	for gvr, kind := range policyResources {
		listKinds[gvr] = kind + "List"
	}
	c := &routeCluster{
		core: fake.NewClientset(core...),
		gw:   gwfake.NewSimpleClientset(gw...),
		dyn:  dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, dyn...),
	}
	statusSubresource(c.gw)
	if crds {
		c.core.Discovery().(*fakediscovery.FakeDiscovery).Resources = append([]*metav1.APIResourceList{
			{GroupVersion: "gateway.networking.k8s.io/v1", APIResources: []metav1.APIResource{
				{Name: "httproutes", Namespaced: true, Kind: "HTTPRoute"},
				{Name: "grpcroutes", Namespaced: true, Kind: "GRPCRoute"},
			}},
			{GroupVersion: serviceprofile.APIVersion, APIResources: []metav1.APIResource{
				{Name: serviceprofile.GroupVersionResource.Resource, Namespaced: true, Kind: serviceprofile.Kind},
			}},
		}, policyDiscovery())
	}
	return c
}

// serve runs a Server on c's clientsets, configured by o, until the test
// ends, and connects c.dst to it.
func (c *routeCluster) serve(t testing.TB, o clusterOptions) {
	t.Helper()
	logTo := o.logTo
	if logTo == nil {
		logTo = io.Discard
	}
	if testing.Verbose() {
		logTo = io.MultiWriter(logTo, testWriter{t})
	}
	log := slog.New(slog.NewTextHandler(logTo, nil))
	cfg := DefaultConfig()
	if o.cfg != nil {
		cfg = *o.cfg
	}
	c.reg = prometheus.NewRegistry()
	srv, err := New(cfg, c.core, c.reg, log)
	if err != nil {
		t.Fatal(err)
	}
	clients := RouteClients{Gateway: c.gw, Dynamic: c.dyn, Discovery: c.core.Discovery()}
	if err := srv.WatchRoutes(clients); err != nil {
		t.Fatal(err)
	}
	if o.inbound {
		if err := srv.WatchInbound(clients); err != nil {
			t.Fatal(err)
		}
	}
	// Cleanups run last first: the connection, the gRPC server, then Run.
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	eventually.Within(t, 30*time.Second, "the server ready", func() bool { return srv.Ready() == nil })
	lis := bufconn.Listen(1 << 20)
	var serverOpts []grpc.ServerOption
	if o.serverCreds != nil {
		serverOpts = append(serverOpts, grpc.Creds(o.serverCreds))
	}
	if o.callers {
		serverOpts = append(serverOpts, grpc.ChainStreamInterceptor(srv.StreamInterceptor()))
	}
	gs := grpc.NewServer(serverOpts...)
	pb.RegisterDestinationServer(gs, srv)
	var served net.Listener = lis
	if o.peerAddr != nil {
		served = fromAddr{lis, o.peerAddr}
	}
	go func() { _ = gs.Serve(served) }()
	t.Cleanup(gs.Stop)
	clientCreds := o.clientCreds
	if clientCreds == nil {
		clientCreds = insecure.NewCredentials()
	}
	c.dial = func(creds credentials.TransportCredentials) pb.DestinationClient {
		conn, err := grpc.NewClient("passthrough:///bufconn", grpc.WithTransportCredentials(creds),
			grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return pb.NewDestinationClient(conn)
	}
	c.dst = c.dial(clientCreds)
}

// fromAddr is a listener whose connections come from addr.
type fromAddr struct {
	net.Listener
	addr net.Addr
}

func (l fromAddr) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return remoteAddrConn{c, l.addr}, nil
}

type remoteAddrConn struct {
	net.Conn
	addr net.Addr
}

func (c remoteAddrConn) RemoteAddr() net.Addr { return c.addr }

// statusSubresource makes the fake Gateway API clientset treat status as
// the API server does: an update of the status subresource changes only
// the status, any other update keeps the stored status.
func statusSubresource(gw *gwfake.Clientset) {
	gw.PrependReactor("update", "httproutes", keepOtherHalf(gw, func(r *gatewayv1.HTTPRoute) *gatewayv1.HTTPRouteStatus { return &r.Status }))
	gw.PrependReactor("update", "grpcroutes", keepOtherHalf(gw, func(r *gatewayv1.GRPCRoute) *gatewayv1.GRPCRouteStatus { return &r.Status }))
}

// keepOtherHalf is the reactor of statusSubresource for one kind: the
// stored object with the update's status, or the update with the stored
// status.
func keepOtherHalf[T interface {
	runtime.Object
	metav1.Object
}, S any](gw *gwfake.Clientset, status func(T) *S) k8stesting.ReactionFunc {
	return func(action k8stesting.Action) (bool, runtime.Object, error) {
		u := action.(k8stesting.UpdateAction)
		obj := u.GetObject().DeepCopyObject().(T)
		stored, err := gw.Tracker().Get(action.GetResource(), obj.GetNamespace(), obj.GetName())
		if err != nil {
			return true, nil, err
		}
		cur := stored.(T)
		if u.GetSubresource() == "status" {
			*status(cur) = *status(obj)
			obj = cur
		} else {
			*status(obj) = *status(cur)
		}
		return true, obj, gw.Tracker().Update(action.GetResource(), obj, obj.GetNamespace())
	}
}

func toUnstructured(t testing.TB, sp *serviceprofile.ServiceProfile) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(sp)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(serviceprofile.APIVersion)
	u.SetKind(serviceprofile.Kind)
	return u
}

// watch opens GetOutboundPolicy for path as a proxy in namespace ns ("":
// no context token).
func (c *routeCluster) watch(t testing.TB, path, ns string) *recvStream[*pb.OutboundPolicy] {
	t.Helper()
	return open(t, func(ctx context.Context, req *pb.GetDestination, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.OutboundPolicy], error) {
		if ns != "" {
			req.ContextToken = fmt.Sprintf(`{"ns":%q}`, ns)
		}
		return c.dst.GetOutboundPolicy(ctx, req, opts...)
	}, path)
}

func (c *routeCluster) createProfile(t testing.TB, sp *serviceprofile.ServiceProfile) {
	t.Helper()
	if _, err := c.dyn.Resource(serviceprofile.GroupVersionResource).Namespace(sp.Namespace).Create(context.Background(), toUnstructured(t, sp), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *routeCluster) deleteProfile(t testing.TB, ns, name string) {
	t.Helper()
	if err := c.dyn.Resource(serviceprofile.GroupVersionResource).Namespace(ns).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
}

func (c *routeCluster) httpRoutes(ns string) gatewayclient.HTTPRouteInterface {
	return c.gw.GatewayV1().HTTPRoutes(ns)
}

// summary describes a policy in one line: parent, source, and per route
// its ref and its rules' backends (authority or failure, and weight).
func summary(p *pb.OutboundPolicy) string {
	var b strings.Builder
	if r := p.GetParent(); r != nil {
		fmt.Fprintf(&b, "%s/%s %s/%s:%d ", r.Group, r.Kind, r.Namespace, r.Name, r.Port)
	} else {
		b.WriteString("no-parent ")
	}
	b.WriteString(p.GetSource())
	for _, r := range p.GetRoutes() {
		fmt.Fprintf(&b, " %s:%s/%s[", r.Ref.GetKind(), r.Ref.GetNamespace(), r.Ref.GetName())
		for i, rule := range r.Rules {
			if i > 0 {
				b.WriteString(";")
			}
			for j, be := range rule.Backends {
				if j > 0 {
					b.WriteString(",")
				}
				target := be.Authority
				if be.Failure != "" {
					target = "!" + be.Failure
				}
				fmt.Fprintf(&b, "%s*%d", target, be.Weight)
			}
		}
		b.WriteString("]")
	}
	return b.String()
}

// expectPolicy reads the next policy and compares its summary.
func expectPolicy(t testing.TB, s *recvStream[*pb.OutboundPolicy], want string) *pb.OutboundPolicy {
	t.Helper()
	p := s.next(t, wait)
	if got := summary(p); got != want {
		t.Fatalf("policy\n got %s\nwant %s", got, want)
	}
	return p
}

const (
	webPath      = "web.ns.svc.cluster.local:80"
	webDefault   = "core/Service ns/web:80 default default:/http[web.ns.svc.cluster.local:80*1]"
	webClusterIP = "10.96.0.10"
)

// routeFixture: Services web (ClusterIP 10.96.0.10) and canary in ns,
// port 80, and a pod with IP 10.1.0.1.
func routeFixture() []any {
	return []any{
		service("ns", "web", webClusterIP, svcPort("http", 80, intstr.FromInt32(8080))),
		service("ns", "canary", "10.96.0.11", svcPort("http", 80, intstr.FromInt32(8080))),
		pod("ns", "web-1", "10.1.0.1", true, nil),
	}
}

// httpRoute is an HTTPRoute in ns whose parent is Service ns/web port 80
// (parentNS "" : the route's namespace), splitting between backends
// ("name=weight", port 80, in the route's namespace unless "ns/name").
func httpRoute(ns, name, parentNS string, backends ...string) *gatewayv1.HTTPRoute {
	ref := gatewayv1.ParentReference{Group: ptr(gatewayv1.Group("core")), Kind: ptr(gatewayv1.Kind("Service")), Name: "web", Port: ptr(gatewayv1.PortNumber(80))}
	if parentNS != "" {
		ref.Namespace = ptr(gatewayv1.Namespace(parentNS))
	}
	rule := gatewayv1.HTTPRouteRule{}
	for _, b := range backends {
		nameWeight, weightText, _ := strings.Cut(b, "=")
		var weight int32 = 1
		fmt.Sscan(weightText, &weight)
		br := gatewayv1.HTTPBackendRef{BackendRef: gatewayv1.BackendRef{Weight: &weight, BackendObjectReference: gatewayv1.BackendObjectReference{Port: ptr(gatewayv1.PortNumber(80))}}}
		if bns, bname, ok := strings.Cut(nameWeight, "/"); ok {
			br.Namespace = ptr(gatewayv1.Namespace(bns))
			nameWeight = bname
		}
		br.Name = gatewayv1.ObjectName(nameWeight)
		rule.BackendRefs = append(rule.BackendRefs, br)
	}
	return &gatewayv1.HTTPRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: gatewayv1.HTTPRouteSpec{
			CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{ref}},
			Rules:           []gatewayv1.HTTPRouteRule{rule},
		},
	}
}

// webProfile is a ServiceProfile in ns for Service ns/web with one route
// (when route is set) named route.
func webProfile(ns, route string) *serviceprofile.ServiceProfile {
	sp := &serviceprofile.ServiceProfile{
		TypeMeta:   metav1.TypeMeta{APIVersion: serviceprofile.APIVersion, Kind: serviceprofile.Kind},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web.ns.svc.cluster.local"},
	}
	if route != "" {
		sp.Spec.Routes = []*serviceprofile.RouteSpec{{Name: route, Condition: &serviceprofile.RequestMatch{Method: "GET", PathRegex: "/books/[^/]*"}, IsRetryable: true, Timeout: "250ms"}}
	}
	return sp
}

func TestOutboundPolicyDefault(t *testing.T) {
	c := startRouteCluster(t, true, routeFixture()...)
	start := time.Now()
	byName := expectPolicy(t, c.watch(t, webPath, "client"), webDefault)
	t.Logf("first message after %v", time.Since(start))
	if r := byName.Routes[0]; r.Protocol != pb.OutboundRoute_HTTP || len(r.Rules) != 1 || r.Rules[0].Retry != nil || r.Rules[0].Timeouts != nil {
		t.Errorf("default route %v", r)
	}
	byIP := expectPolicy(t, c.watch(t, webClusterIP+":80", "client"), webDefault)
	if !proto.Equal(byName, byIP) {
		t.Errorf("by ClusterIP %v, by name %v", byIP, byName)
	}
	for _, path := range []string{"10.1.0.1:8080", "10.9.9.9:80", "nosuch.ns.svc.cluster.local:80"} {
		p := expectPolicy(t, c.watch(t, path, "client"), "no-parent default")
		if len(p.Routes) != 0 {
			t.Errorf("%s: routes %v", path, p.Routes)
		}
	}
}

// TestOutboundPolicyFollowsHTTPRoute: create, reweigh and delete a
// producer route; each change reaches the stream in under 100 ms, and
// changes that do not alter the policy send nothing.
func TestOutboundPolicyFollowsHTTPRoute(t *testing.T) {
	c := startRouteCluster(t, true, routeFixture()...)
	ctx := context.Background()
	s := c.watch(t, webPath, "client")
	expectPolicy(t, s, webDefault)

	var latencies []time.Duration
	timed := func(change func(), want string) {
		t.Helper()
		start := time.Now()
		change()
		expectPolicy(t, s, want)
		latencies = append(latencies, time.Since(start))
	}
	timed(func() {
		if _, err := c.httpRoutes("ns").Create(ctx, httpRoute("ns", "split", "", "web=90", "canary=10"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}, "core/Service ns/web:80 httproute HTTPRoute:ns/split[web.ns.svc.cluster.local:80*90,canary.ns.svc.cluster.local:80*10]")
	s.quiet(t, 300*time.Millisecond) // the status write changes no policy

	timed(func() {
		r, err := c.httpRoutes("ns").Get(ctx, "split", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		*r.Spec.Rules[0].BackendRefs[0].Weight, *r.Spec.Rules[0].BackendRefs[1].Weight = 50, 50
		if _, err := c.httpRoutes("ns").Update(ctx, r, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}, "core/Service ns/web:80 httproute HTTPRoute:ns/split[web.ns.svc.cluster.local:80*50,canary.ns.svc.cluster.local:80*50]")

	// Unrelated changes: another Service, a route of another Service.
	other := service("ns", "other", "10.96.0.12", svcPort("http", 80, intstr.FromInt32(8080)))
	if _, err := c.core.CoreV1().Services("ns").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other.Annotations = map[string]string{"retry.plexus.dev/http": "5xx"}
	if _, err := c.core.CoreV1().Services("ns").Update(ctx, other, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	unrelated := httpRoute("ns", "unrelated", "", "other=1")
	unrelated.Spec.ParentRefs[0].Name = "other"
	if _, err := c.httpRoutes("ns").Create(ctx, unrelated, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s.quiet(t, 300*time.Millisecond)

	timed(func() {
		if err := c.httpRoutes("ns").Delete(ctx, "split", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}, webDefault)
	s.quiet(t, 300*time.Millisecond)

	var worst time.Duration
	for _, l := range latencies {
		worst = max(worst, l)
	}
	t.Logf("change → message latencies (create, update, delete): %v", latencies)
	if worst >= 100*time.Millisecond {
		t.Errorf("a change took %v to reach the stream, want < 100ms (ARCHITECTURE.md §8)", worst)
	}
}

// TestOutboundPolicyConsumerRoutes: a route in namespace client whose
// parent is ns/web applies to proxies in client only (GEP-1426); the
// producer route applies to the others.
func TestOutboundPolicyConsumerRoutes(t *testing.T) {
	objs := append(routeFixture(),
		httpRoute("ns", "producer", "", "web=1"),
		// A consumer route may send to its parent Service (cross-namespace
		// backends other than the parent need a ReferenceGrant).
		httpRoute("client", "consumer", "ns", "ns/web=1"))
	c := startRouteCluster(t, true, objs...)
	producer := "core/Service ns/web:80 httproute HTTPRoute:ns/producer[web.ns.svc.cluster.local:80*1]"
	consumer := "core/Service ns/web:80 httproute HTTPRoute:client/consumer[web.ns.svc.cluster.local:80*1]"
	fromClient := c.watch(t, webPath, "client")
	expectPolicy(t, fromClient, consumer)
	expectPolicy(t, c.watch(t, webClusterIP+":80", "client"), consumer)
	expectPolicy(t, c.watch(t, webPath, "elsewhere"), producer)
	expectPolicy(t, c.watch(t, webPath, "ns"), producer)
	expectPolicy(t, c.watch(t, webPath, ""), producer)

	if err := c.httpRoutes("client").Delete(context.Background(), "consumer", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectPolicy(t, fromClient, producer)
}

// TestOutboundPolicyServiceProfile: the client namespace's profile wins
// over the Service namespace's; a profile with routes overrides the
// HTTPRoutes, and deleting it restores them.
func TestOutboundPolicyServiceProfile(t *testing.T) {
	objs := append(routeFixture(), httpRoute("ns", "split", "", "web=90", "canary=10"))
	c := startRouteCluster(t, true, objs...)
	routes := "core/Service ns/web:80 httproute HTTPRoute:ns/split[web.ns.svc.cluster.local:80*90,canary.ns.svc.cluster.local:80*10]"
	fromClient, fromOther := c.watch(t, webPath, "client"), c.watch(t, webPath, "other")
	expectPolicy(t, fromClient, routes)
	expectPolicy(t, fromOther, routes)

	profileOf := func(ns, route string) string {
		return fmt.Sprintf("core/Service ns/web:80 serviceprofile ServiceProfile:%s/%s[web.ns.svc.cluster.local:80*1] default:/http[web.ns.svc.cluster.local:80*1]", ns, route)
	}
	c.createProfile(t, webProfile("ns", "producer-books"))
	p := expectPolicy(t, fromClient, profileOf("ns", "producer-books"))
	expectPolicy(t, fromOther, profileOf("ns", "producer-books"))
	if rule := p.Routes[0].Rules[0]; rule.Retry == nil || rule.GetTimeouts().GetRequest().AsDuration() != 250*time.Millisecond {
		t.Errorf("profile route rule %v: want retries and a 250ms timeout", rule)
	}

	c.createProfile(t, webProfile("client", "client-books"))
	expectPolicy(t, fromClient, profileOf("client", "client-books"))
	fromOther.quiet(t, 200*time.Millisecond)

	c.deleteProfile(t, "client", "web.ns.svc.cluster.local")
	expectPolicy(t, fromClient, profileOf("ns", "producer-books"))
	c.deleteProfile(t, "ns", "web.ns.svc.cluster.local")
	expectPolicy(t, fromClient, routes)
	expectPolicy(t, fromOther, routes)

	// A profile without routes or dstOverrides leaves the routes alone.
	c.createProfile(t, webProfile("ns", ""))
	fromClient.quiet(t, 200*time.Millisecond)
}

// TestOutboundPolicyProfileDstOverrides: a profile's weights arrive as
// written (quantities survive the unstructured conversion).
func TestOutboundPolicyProfileDstOverrides(t *testing.T) {
	sp := webProfile("ns", "")
	sp.Spec.DstOverrides = []*serviceprofile.WeightedDst{
		{Authority: "web.ns.svc.cluster.local:80", Weight: resource.MustParse("900m")},
		{Authority: "canary.ns.svc.cluster.local:80", Weight: resource.MustParse("100m")},
	}
	c := startRouteCluster(t, true, append(routeFixture(), sp)...)
	expectPolicy(t, c.watch(t, webPath, "client"), "core/Service ns/web:80 serviceprofile default:/http[web.ns.svc.cluster.local:80*900,canary.ns.svc.cluster.local:80*100]")
}

// TestOutboundPolicyWithoutCRDs: with neither the Gateway API nor the
// ServiceProfile CRDs served, the server becomes ready and every Service
// gets its default route.
func TestOutboundPolicyWithoutCRDs(t *testing.T) {
	c := startRouteCluster(t, false, append(routeFixture(), httpRoute("ns", "split", "", "canary=1"))...)
	expectPolicy(t, c.watch(t, webPath, "client"), webDefault)
	expectPolicy(t, c.watch(t, webClusterIP+":80", ""), webDefault)
}

// TestOutboundPolicyClusterIPOfLaterService: a stream for a ClusterIP
// that no Service has yet follows the Service that gets it (proxies ask
// by ClusterIP, and may ask before destination has seen the Service).
func TestOutboundPolicyClusterIPOfLaterService(t *testing.T) {
	c := startRouteCluster(t, true, routeFixture()...)
	ctx := context.Background()
	s := c.watch(t, "10.96.0.20:80", "client")
	expectPolicy(t, s, "no-parent default")
	late := service("ns", "late", "10.96.0.20", svcPort("http", 80, intstr.FromInt32(8080)))
	if _, err := c.core.CoreV1().Services("ns").Create(ctx, late, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectPolicy(t, s, "core/Service ns/late:80 default default:/http[late.ns.svc.cluster.local:80*1]")
	if err := c.core.CoreV1().Services("ns").Delete(ctx, "late", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	expectPolicy(t, s, "no-parent default")
}

// TestOutboundPolicyServiceAnnotations: the Service's annotations apply
// to its default route; a malformed one is left out, the others apply.
func TestOutboundPolicyServiceAnnotations(t *testing.T) {
	c := startRouteCluster(t, true, routeFixture()...)
	ctx := context.Background()
	s := c.watch(t, webPath, "client")
	expectPolicy(t, s, webDefault)
	svc, err := c.core.CoreV1().Services("ns").Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	svc.Annotations = map[string]string{"retry.plexus.dev/http": "5xx", "timeout.plexus.dev/request": "soon"}
	if _, err := c.core.CoreV1().Services("ns").Update(ctx, svc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rule := expectPolicy(t, s, webDefault).Routes[0].Rules[0]
	if rule.Retry == nil || len(rule.Retry.HttpStatuses) != 1 || rule.Retry.HttpStatuses[0].Min != 500 || rule.Timeouts != nil {
		t.Errorf("default rule %v: want 5xx retries and no timeout", rule)
	}
}

// TestOutboundPolicyProfileAsStored: a profile as the API server stores
// it (integers where the types say quantity and float) is read.
func TestOutboundPolicyProfileAsStored(t *testing.T) {
	c := startRouteCluster(t, true, routeFixture()...)
	s := c.watch(t, webPath, "client")
	expectPolicy(t, s, webDefault)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": serviceprofile.APIVersion, "kind": serviceprofile.Kind,
		"metadata": map[string]any{"namespace": "ns", "name": "web.ns.svc.cluster.local"},
		"spec": map[string]any{
			"retryBudget": map[string]any{"retryRatio": int64(1), "minRetriesPerSecond": int64(5), "ttl": "10s"},
			"dstOverrides": []any{
				map[string]any{"authority": "web.ns.svc.cluster.local:80", "weight": int64(90)},
				map[string]any{"authority": "canary.ns.svc.cluster.local:80", "weight": "10"},
			},
		},
	}}
	if _, err := c.dyn.Resource(serviceprofile.GroupVersionResource).Namespace("ns").Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectPolicy(t, s, "core/Service ns/web:80 serviceprofile default:/http[web.ns.svc.cluster.local:80*90000,canary.ns.svc.cluster.local:80*10000]")
}

// TestWatchRoutesDiscoveryFailure: a discovery error other than "not
// found" is no proof that a CRD is missing: WatchRoutes fails (the
// process restarts) rather than ignoring routes until the next restart.
func TestWatchRoutesDiscoveryFailure(t *testing.T) {
	core := fake.NewClientset()
	core.PrependReactor("get", "resource", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	srv, err := New(DefaultConfig(), core, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	err = srv.WatchRoutes(RouteClients{Gateway: gwfake.NewSimpleClientset(), Dynamic: dynfake.NewSimpleDynamicClient(runtime.NewScheme()), Discovery: core.Discovery()})
	if err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("WatchRoutes with failing discovery: %v, want the discovery error", err)
	}
}

// TestOutboundPolicyInvalidClientProfile: an invalid profile in the
// client's namespace (one the validator should have refused) counts as
// none there: the Service namespace's profile applies.
func TestOutboundPolicyInvalidClientProfile(t *testing.T) {
	bad := webProfile("client", "bad-regex")
	bad.Spec.Routes[0].Condition.PathRegex = "/books/("
	c := startRouteCluster(t, true, append(routeFixture(), webProfile("ns", "producer-books"), bad, httpRoute("ns", "split", "", "web=1"))...)
	expectPolicy(t, c.watch(t, webPath, "client"), "core/Service ns/web:80 serviceprofile ServiceProfile:ns/producer-books[web.ns.svc.cluster.local:80*1] default:/http[web.ns.svc.cluster.local:80*1]")
}

// TestOutboundPolicyBurstConverges: a burst of updates ends on the last
// one's policy, and nothing follows it.
func TestOutboundPolicyBurstConverges(t *testing.T) {
	c := startRouteCluster(t, true, append(routeFixture(), httpRoute("ns", "split", "", "web=1", "canary=1"))...)
	ctx := context.Background()
	s := c.watch(t, webPath, "client")
	s.next(t, wait)
	for w := int32(2); w <= 50; w++ {
		r, err := c.httpRoutes("ns").Get(ctx, "split", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		*r.Spec.Rules[0].BackendRefs[1].Weight = w
		if _, err := c.httpRoutes("ns").Update(ctx, r, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := "core/Service ns/web:80 httproute HTTPRoute:ns/split[web.ns.svc.cluster.local:80*1,canary.ns.svc.cluster.local:80*50]"
	n := 0
	for got := ""; got != want; n++ {
		got = summary(s.next(t, wait))
	}
	s.quiet(t, 300*time.Millisecond)
	t.Logf("49 updates arrived as %d messages", n)
}
