package destination

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	k8stesting "k8s.io/client-go/testing"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/control/outboundpolicy"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// routeConditions is the Accepted and ResolvedRefs conditions Plexus
// wrote on a route, as "Type=Status/Reason: message".
func routeConditions(parents []gatewayv1.RouteParentStatus) []string {
	var out []string
	for _, p := range parents {
		if p.ControllerName != outboundpolicy.ControllerName {
			continue
		}
		for _, c := range p.Conditions {
			s := c.Type + "=" + string(c.Status) + "/" + c.Reason
			if c.Message != "" {
				s += ": " + c.Message
			}
			out = append(out, s)
		}
	}
	return out
}

// waitStatus polls the fake clientset's stored route until its
// conditions are want.
func (c *routeCluster) waitStatus(t testing.TB, ns, name string, want ...string) {
	t.Helper()
	var got []string
	if eventually.Holds(wait, func() bool {
		r, err := c.httpRoutes(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = routeConditions(r.Status.Parents)
		return equalStrings(got, want)
	}) {
		return
	}
	t.Fatalf("status of HTTPRoute %s/%s:\n got %q\nwant %q", ns, name, got, want)
}

// statusWrites counts the UpdateStatus calls on routes so far.
func (c *routeCluster) statusWrites() int {
	n := 0
	for _, a := range c.gw.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

// quietStatus fails if any route status is written within d.
func (c *routeCluster) quietStatus(t testing.TB, d time.Duration) {
	t.Helper()
	before := c.statusWrites()
	// Sleep: a quiet window is the assertion; a write that never comes has no event.
	time.Sleep(d)
	if n := c.statusWrites() - before; n != 0 {
		var written []string
		for _, a := range c.gw.Actions() {
			if u, ok := a.(k8stesting.UpdateAction); ok && a.GetSubresource() == "status" {
				written = append(written, u.GetObject().(metav1.Object).GetName())
			}
		}
		t.Fatalf("%d status writes within a quiet %v (all writes: %v)", n, d, written)
	}
}

// TestRouteStatusMalformedAnnotation: a route with a malformed annotation
// never reaches a proxy, and its status says which annotation.
func TestRouteStatusMalformedAnnotation(t *testing.T) {
	// The fake API server sets no creationTimestamp; routes are ordered
	// oldest first, so "good" goes first although "bad" sorts before it.
	goodRoute := httpRoute("ns", "good", "", "web=1")
	goodRoute.CreationTimestamp = metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	c := startRouteCluster(t, true, append(routeFixture(), goodRoute)...)
	good := "core/Service ns/web:80 httproute HTTPRoute:ns/good[web.ns.svc.cluster.local:80*1]"
	s := c.watch(t, webPath, "client")
	expectPolicy(t, s, good)
	c.waitStatus(t, "ns", "good", "Accepted=True/Accepted", "ResolvedRefs=True/ResolvedRefs")

	bad := httpRoute("ns", "bad", "", "canary=1")
	bad.Annotations = map[string]string{"retry.plexus.dev/http": "6xx"}
	bad.CreationTimestamp = metav1.NewTime(time.Now().Truncate(time.Second))
	if _, err := c.httpRoutes("ns").Create(context.Background(), bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c.waitStatus(t, "ns", "bad", `Accepted=False/UnsupportedValue: retry.plexus.dev/http: "6xx" is not a list of 5xx, gateway-error, NNN or NNN-MMM (HTTP statuses 100-599): "6xx"`, "ResolvedRefs=True/ResolvedRefs")
	s.quiet(t, 200*time.Millisecond)
	c.quietStatus(t, time.Second)

	// Fixed, it is Accepted and reaches the proxy.
	r, err := c.httpRoutes("ns").Get(context.Background(), "bad", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r.Annotations["retry.plexus.dev/http"] = "5xx"
	if _, err := c.httpRoutes("ns").Update(context.Background(), r, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := expectPolicy(t, s, good+" HTTPRoute:ns/bad[canary.ns.svc.cluster.local:80*1]")
	if p.Routes[1].Rules[0].Retry == nil {
		t.Errorf("fixed route has no retry policy: %v", p.Routes[1])
	}
	c.waitStatus(t, "ns", "bad", "Accepted=True/Accepted", "ResolvedRefs=True/ResolvedRefs")
}

// TestRouteStatusMissingBackend: a route whose backend does not exist is
// Accepted (its requests get 500) with ResolvedRefs=False/BackendNotFound,
// written once and not again while nothing changes; creating the backend
// resolves it.
func TestRouteStatusMissingBackend(t *testing.T) {
	c := startRouteCluster(t, true, routeFixture()...)
	ctx := context.Background()
	s := c.watch(t, webPath, "client")
	expectPolicy(t, s, webDefault)
	if _, err := c.httpRoutes("ns").Create(ctx, httpRoute("ns", "split", "", "web=90", "ghost=10"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectPolicy(t, s, "core/Service ns/web:80 httproute HTTPRoute:ns/split[web.ns.svc.cluster.local:80*90,!Service ns/ghost not found*10]")
	c.waitStatus(t, "ns", "split", "Accepted=True/Accepted",
		"ResolvedRefs=False/BackendNotFound: rules[0].backendRefs[1]: Service ns/ghost not found")
	if n := c.statusWrites(); n != 1 {
		t.Errorf("%d status writes, want 1", n)
	}
	c.quietStatus(t, time.Second)

	ghost := service("ns", "ghost", "10.96.0.13", svcPort("http", 80, intstr.FromInt32(8080)))
	if _, err := c.core.CoreV1().Services("ns").Create(ctx, ghost, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	expectPolicy(t, s, "core/Service ns/web:80 httproute HTTPRoute:ns/split[web.ns.svc.cluster.local:80*90,ghost.ns.svc.cluster.local:80*10]")
	c.waitStatus(t, "ns", "split", "Accepted=True/Accepted", "ResolvedRefs=True/ResolvedRefs")
	c.quietStatus(t, time.Second)
	if n := c.statusWrites(); n != 2 {
		t.Errorf("%d status writes, want 2", n)
	}
	r, err := c.httpRoutes("ns").Get(ctx, "split", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(r.Spec.Rules[0].BackendRefs[1].Name), "ghost") {
		t.Errorf("a status write changed the spec: %+v", r.Spec)
	}
}

// TestGRPCRouteStatusAndPolicy: a GRPCRoute's missing backend is
// reported in its status, and GRPCRoutes replace the HTTPRoutes of the
// same parent (as Linkerd's policy controller).
func TestGRPCRouteStatusAndPolicy(t *testing.T) {
	c := startRouteCluster(t, true, append(routeFixture(), httpRoute("ns", "web", "", "web=1"))...)
	ctx := context.Background()
	s := c.watch(t, webPath, "client")
	expectPolicy(t, s, "core/Service ns/web:80 httproute HTTPRoute:ns/web[web.ns.svc.cluster.local:80*1]")
	g := &gatewayv1.GRPCRoute{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rpc"},
		Spec: gatewayv1.GRPCRouteSpec{
			CommonRouteSpec: httpRoute("ns", "", "").Spec.CommonRouteSpec,
			Rules: []gatewayv1.GRPCRouteRule{{BackendRefs: []gatewayv1.GRPCBackendRef{{BackendRef: gatewayv1.BackendRef{
				BackendObjectReference: gatewayv1.BackendObjectReference{Name: "ghost", Port: ptr(gatewayv1.PortNumber(80))},
			}}}}},
		},
	}
	if _, err := c.gw.GatewayV1().GRPCRoutes("ns").Create(ctx, g, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := expectPolicy(t, s, "core/Service ns/web:80 httproute GRPCRoute:ns/rpc[!Service ns/ghost not found*1]")
	if p.Routes[0].Protocol != pb.OutboundRoute_GRPC {
		t.Errorf("GRPCRoute protocol %v", p.Routes[0].Protocol)
	}
	want := []string{"Accepted=True/Accepted", "ResolvedRefs=False/BackendNotFound: rules[0].backendRefs[0]: Service ns/ghost not found"}
	var got []string
	if !eventually.Holds(wait, func() bool {
		r, err := c.gw.GatewayV1().GRPCRoutes("ns").Get(ctx, "rpc", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		got = routeConditions(r.Status.Parents)
		return equalStrings(got, want)
	}) {
		t.Fatalf("GRPCRoute status %q, want %q", got, want)
	}
	c.quietStatus(t, time.Second)
}
