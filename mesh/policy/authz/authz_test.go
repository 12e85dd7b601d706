package authz

import (
	"fmt"
	"net/netip"
	"testing"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
)

const (
	idA = "spiffe://cluster.local/ns/shop/sa/a"
	idB = "spiffe://cluster.local/ns/shop/sa/b"
	idX = "spiffe://cluster.local/ns/other/sa/x"
)

func ref(kind, name string) *pb.ResourceRef { return &pb.ResourceRef{Kind: kind, Name: name} }

func compile(t testing.TB, p *pb.InboundPolicy) *Policy {
	t.Helper()
	c, err := Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func client(addr, id string) *Client { return &Client{Addr: netip.MustParseAddr(addr), ID: id} }

func TestConnectionDecisions(t *testing.T) {
	podNet := &pb.Network{Cidr: "10.244.0.0/16", Except: []string{"10.244.9.0/24"}}
	for _, c := range []struct {
		name   string
		authzs []*pb.Authorization
		client *Client
		allow  bool
	}{
		{"deny: no authorization", nil, client("10.244.0.5", idA), false},
		{"unauthenticated from anywhere", []*pb.Authorization{{Ref: ref("default", "all-unauthenticated")}}, client("192.0.2.1", ""), true},
		{"authenticated: plaintext refused", []*pb.Authorization{{Ref: ref("default", "all-authenticated"), MeshTls: true}}, client("10.244.0.5", ""), false},
		{"authenticated: any identity", []*pb.Authorization{{Ref: ref("default", "all-authenticated"), MeshTls: true}}, client("10.244.0.5", idX), true},
		{"exact identity: A", []*pb.Authorization{{MeshTls: true, Identities: []string{idA}}}, client("10.244.0.5", idA), true},
		{"exact identity: B refused", []*pb.Authorization{{MeshTls: true, Identities: []string{idA}}}, client("10.244.0.5", idB), false},
		{"namespace prefix", []*pb.Authorization{{MeshTls: true, Prefixes: []string{"spiffe://cluster.local/ns/shop/sa/"}}}, client("10.244.0.5", idB), true},
		{"namespace prefix: other namespace refused", []*pb.Authorization{{MeshTls: true, Prefixes: []string{"spiffe://cluster.local/ns/shop/sa/"}}}, client("10.244.0.5", idX), false},
		{"network: inside", []*pb.Authorization{{Networks: []*pb.Network{podNet}}}, client("10.244.3.3", ""), true},
		{"network: outside", []*pb.Authorization{{Networks: []*pb.Network{podNet}}}, client("10.96.0.1", ""), false},
		{"network: excepted", []*pb.Authorization{{Networks: []*pb.Network{podNet}}}, client("10.244.9.9", ""), false},
		{"network: IPv4-mapped IPv6 client", []*pb.Authorization{{Networks: []*pb.Network{podNet}}}, client("::ffff:10.244.3.3", ""), true},
		{"network and identity both needed", []*pb.Authorization{{Networks: []*pb.Network{podNet}, MeshTls: true, Identities: []string{idA}}}, client("192.0.2.1", idA), false},
	} {
		p := compile(t, &pb.InboundPolicy{Authorizations: c.authzs})
		d := p.Connection(c.client)
		if d.Allowed != c.allow || d.Denied == c.allow {
			t.Errorf("%s: %+v, want allowed=%v", c.name, d, c.allow)
		}
	}
}

// Audit and dry run allow what they would deny and say so.
func TestAuditAndDryRun(t *testing.T) {
	onlyA := &pb.Authorization{Ref: ref("AuthorizationPolicy", "only-a"), MeshTls: true, Identities: []string{idA}}
	audit := compile(t, &pb.InboundPolicy{Audit: true, Authorizations: []*pb.Authorization{onlyA}})
	if d := audit.Connection(client("10.0.0.1", idB)); !d.Allowed || !d.Denied || !d.DryRun {
		t.Errorf("audit, B: %+v, want allowed and reported denied", d)
	}
	if d := audit.Connection(client("10.0.0.1", idA)); !d.Allowed || d.Denied {
		t.Errorf("audit, A: %+v, want allowed", d)
	}
	dry := &pb.Authorization{Ref: ref("AuthorizationPolicy", "dry"), MeshTls: true, Identities: []string{idB}, DryRun: true}
	p := compile(t, &pb.InboundPolicy{Authorizations: []*pb.Authorization{onlyA, dry}})
	if d := p.Connection(client("10.0.0.1", idX)); !d.Allowed || !d.Denied || !d.DryRun || d.Authz != nil {
		t.Errorf("dry run, X: %+v, want allowed, reported denied", d)
	}
	if d := p.Connection(client("10.0.0.1", idB)); !d.Allowed || !d.Denied || !d.DryRun || d.Authz.GetName() != "dry" {
		t.Errorf("dry run, B: %+v, want allowed by the dry-run policy only (reported)", d)
	}
	enforced := compile(t, &pb.InboundPolicy{Authorizations: []*pb.Authorization{onlyA}})
	if d := enforced.Connection(client("10.0.0.1", idX)); d.Allowed {
		t.Errorf("without dry run, X: %+v, want denied", d)
	}
}

// Routes: a request is on the route it matches and allowed by that
// route's authorizations or the port's; none matches: NoRoute.
func TestRoutes(t *testing.T) {
	prefix := func(p string) []*pb.RouteMatch {
		return []*pb.RouteMatch{{Path: &pb.PathMatch{Kind: pb.PathMatch_PREFIX, Value: p}}}
	}
	p := compile(t, &pb.InboundPolicy{
		Authorizations: []*pb.Authorization{{Ref: ref("AuthorizationPolicy", "port-a"), MeshTls: true, Identities: []string{idA}}},
		Routes: []*pb.InboundRoute{
			{Ref: ref("HTTPRoute", "public"), Matches: prefix("/public"), Authorizations: []*pb.Authorization{{Ref: ref("AuthorizationPolicy", "everyone")}}},
			{Ref: ref("HTTPRoute", "admin"), Matches: prefix("/admin")},
		},
	})
	req := func(path string) *routes.Request {
		return &routes.Request{Method: "GET", Authority: "web", Target: path}
	}
	for _, c := range []struct {
		path, id  string
		allow     bool
		route     string
		noRoute   bool
		allowedBy string
	}{
		{"/public/x", "", true, "public", false, "everyone"},
		{"/admin", idA, true, "admin", false, "port-a"},
		{"/admin", idB, false, "admin", false, ""},
		{"/admin", "", false, "admin", false, ""},
		{"/elsewhere", idA, false, "", true, ""},
	} {
		d := p.Request(client("10.244.0.5", c.id), req(c.path))
		if d.Allowed != c.allow || d.NoRoute != c.noRoute || d.Route.GetName() != c.route || d.Authz.GetName() != c.allowedBy {
			t.Errorf("%s from %q: %+v, want allowed=%v route=%q noRoute=%v by %q", c.path, c.id, d, c.allow, c.route, c.noRoute, c.allowedBy)
		}
	}
}

func TestCompileErrorsLeaveOut(t *testing.T) {
	p, err := Compile(&pb.InboundPolicy{Authorizations: []*pb.Authorization{
		{Ref: ref("AuthorizationPolicy", "bad"), Networks: []*pb.Network{{Cidr: "10.0.0.0/33"}}},
		{Ref: ref("AuthorizationPolicy", "good"), MeshTls: true, Identities: []string{idA}},
	}})
	if err == nil {
		t.Fatal("a malformed network compiled without an error")
	}
	if d := p.Connection(client("10.0.0.1", "")); d.Allowed {
		t.Errorf("the malformed authorization allowed a client: %+v (fail closed)", d)
	}
	if d := p.Connection(client("10.0.0.1", idA)); !d.Allowed {
		t.Errorf("the good authorization was lost: %+v", d)
	}
}

// With 50 authorizations on a port, a decision (the worst case: the
// client matches none, every one is tried) costs under 1 µs and
// allocates nothing.
func BenchmarkDecide50(b *testing.B) {
	var authzs []*pb.Authorization
	for i := range 50 {
		authzs = append(authzs, &pb.Authorization{Ref: ref("AuthorizationPolicy", fmt.Sprint(i)),
			Networks: []*pb.Network{{Cidr: fmt.Sprintf("10.%d.0.0/16", i)}}, MeshTls: true,
			Identities: []string{fmt.Sprintf("spiffe://cluster.local/ns/n%d/sa/s", i)}, Prefixes: []string{fmt.Sprintf("spiffe://cluster.local/ns/p%d/", i)}})
	}
	p := compile(b, &pb.InboundPolicy{Authorizations: authzs})
	c := client("10.49.1.1", "spiffe://cluster.local/ns/nobody/sa/s")
	req := &routes.Request{Method: "GET", Authority: "web", Target: "/"}
	b.ReportAllocs()
	for b.Loop() {
		if d := p.Request(c, req); d.Allowed {
			b.Fatal("allowed")
		}
	}
}

// A connection is kept while some authorization but the probe route's
// admits its client (the probe paths admit anyone).
func TestMayConnect(t *testing.T) {
	probe := &pb.InboundRoute{Ref: ref("default", "probe"),
		Matches:        []*pb.RouteMatch{{Method: "GET", Path: &pb.PathMatch{Kind: pb.PathMatch_EXACT, Value: "/healthz"}}},
		Authorizations: []*pb.Authorization{{Ref: ref("default", "probe")}}}
	catchAll := &pb.InboundRoute{Ref: ref("default", "default")}
	deny := compile(t, &pb.InboundPolicy{Routes: []*pb.InboundRoute{probe, catchAll}})
	if deny.MayConnect(client("10.0.0.1", idA)) {
		t.Error("deny with a probe route: a client may keep its connection")
	}
	public := &pb.InboundRoute{Ref: ref("HTTPRoute", "public"), Authorizations: []*pb.Authorization{{Ref: ref("AuthorizationPolicy", "all")}}}
	open := compile(t, &pb.InboundPolicy{Routes: []*pb.InboundRoute{probe, public}})
	if !open.MayConnect(client("10.0.0.1", "")) {
		t.Error("a route open to all: the client may not keep its connection")
	}
	onlyA := compile(t, &pb.InboundPolicy{Authorizations: []*pb.Authorization{{MeshTls: true, Identities: []string{idA}}}, Routes: []*pb.InboundRoute{probe, catchAll}})
	if !onlyA.MayConnect(client("10.0.0.1", idA)) || onlyA.MayConnect(client("10.0.0.1", idB)) {
		t.Error("only A: A must keep its connection, B must not")
	}
}

// On a port with routes, a path an application could normalize to another
// route's is not authorized (/public/../admin would pass as /public).
func TestAmbiguousPathsDenied(t *testing.T) {
	prefix := func(p string) []*pb.RouteMatch {
		return []*pb.RouteMatch{{Path: &pb.PathMatch{Kind: pb.PathMatch_PREFIX, Value: p}}}
	}
	p := compile(t, &pb.InboundPolicy{Routes: []*pb.InboundRoute{
		{Ref: ref("HTTPRoute", "public"), Matches: prefix("/public"), Authorizations: []*pb.Authorization{{Ref: ref("AuthorizationPolicy", "everyone")}}},
		{Ref: ref("HTTPRoute", "admin"), Matches: prefix("/admin"), Authorizations: []*pb.Authorization{{MeshTls: true, Identities: []string{idA}}}},
	}})
	for _, target := range []string{"/public/../admin", "/public/%2e%2e/admin", "/public/..%2fadmin", "/public/.%2E/admin", "/public//admin", "/public/./x", "/public\\..\\admin", "/public/%5c..%5cadmin"} {
		if d := p.Request(client("10.0.0.1", idB), &routes.Request{Method: "GET", Authority: "web", Target: target}); d.Allowed {
			t.Errorf("%s from B: allowed (%+v), want denied", target, d)
		}
	}
	for _, target := range []string{"/public/a.b/c", "/public/..x", "/public?x=/../admin"} {
		if d := p.Request(client("10.0.0.1", idB), &routes.Request{Method: "GET", Authority: "web", Target: target}); !d.Allowed {
			t.Errorf("%s from B: denied, want allowed (not ambiguous)", target)
		}
	}
}
