package inboundpolicy_test

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/plexus-mesh/plexus/control/inboundpolicy"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
)

const (
	idA = "spiffe://cluster.local/ns/shop/sa/a"
	idB = "spiffe://cluster.local/ns/shop/sa/b"
)

func ap(name string) *pb.ResourceRef {
	return &pb.ResourceRef{Group: "policy.plexus.dev", Kind: "AuthorizationPolicy", Namespace: "shop", Name: name}
}

func verdicts(vs []inboundpolicy.Verdict) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = v.String()
	}
	return strings.Join(s, " | ")
}

// TestEvaluate decides as the proxy does; without an address, networks
// are conditions.
func TestEvaluate(t *testing.T) {
	forA := &pb.Authorization{Ref: ap("for-a"), MeshTls: true, Identities: []string{idA}}
	fromNet := &pb.Authorization{Ref: ap("nets"), Networks: []*pb.Network{{Cidr: "10.0.0.0/8", Except: []string{"10.9.0.0/16"}}, {Cidr: "fd00::/8"}}}
	meshFromNet := &pb.Authorization{Ref: ap("mesh-nets"), MeshTls: true, Networks: []*pb.Network{{Cidr: "192.168.0.0/16"}}}
	dryForB := &pb.Authorization{Ref: ap("dry-b"), MeshTls: true, Identities: []string{idB}, DryRun: true}
	server := &pb.ResourceRef{Group: "policy.plexus.dev", Kind: "Server", Namespace: "shop", Name: "web"}
	admin := &pb.InboundRoute{Ref: &pb.ResourceRef{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Namespace: "shop", Name: "admin"},
		Matches:        []*pb.RouteMatch{{Path: &pb.PathMatch{Kind: pb.PathMatch_EXACT, Value: "/admin"}, Method: "POST"}},
		Authorizations: []*pb.Authorization{{Ref: ap("admins"), MeshTls: true, Identities: []string{idB}}}}
	policy := func(audit bool, as ...*pb.Authorization) *pb.InboundPolicy {
		return &pb.InboundPolicy{Server: server, Protocol: "HTTP/1", Audit: audit, Authorizations: as, Routes: []*pb.InboundRoute{admin}}
	}
	for _, tc := range []struct {
		name   string
		policy *pb.InboundPolicy
		client inboundpolicy.Client
		conn   string
		admin  string // a request on route admin
	}{
		{"allowed by identity", policy(false, forA), inboundpolicy.Client{ID: idA},
			"allowed by AuthorizationPolicy shop/for-a", "allowed by AuthorizationPolicy shop/for-a"},
		{"route's own authorization, then the port's", policy(false, forA), inboundpolicy.Client{ID: idB},
			"denied", "allowed by AuthorizationPolicy shop/admins"},
		{"plaintext denied", policy(false, forA), inboundpolicy.Client{}, "denied", "denied"},
		{"networks as conditions", policy(false, meshFromNet, fromNet), inboundpolicy.Client{ID: idA},
			"from 192.168.0.0/16: allowed by AuthorizationPolicy shop/mesh-nets | from 10.0.0.0/8 except 10.9.0.0/16 or fd00::/8: allowed by AuthorizationPolicy shop/nets | denied",
			"from 192.168.0.0/16: allowed by AuthorizationPolicy shop/mesh-nets | from 10.0.0.0/8 except 10.9.0.0/16 or fd00::/8: allowed by AuthorizationPolicy shop/nets | denied"},
		{"address in a network", policy(false, meshFromNet, fromNet), inboundpolicy.Client{ID: idA, Addr: netip.MustParseAddr("10.1.2.3")},
			"allowed by AuthorizationPolicy shop/nets", "allowed by AuthorizationPolicy shop/nets"},
		{"address in an except", policy(false, meshFromNet, fromNet), inboundpolicy.Client{ID: idA, Addr: netip.MustParseAddr("10.9.0.1")},
			"denied", "denied"},
		{"plaintext: a mesh network authorization is no condition", policy(false, meshFromNet), inboundpolicy.Client{},
			"denied", "denied"},
		{"dry run that would allow", policy(false, forA, dryForB), inboundpolicy.Client{ID: idB},
			"let through, reported as allowed by the dry-run AuthorizationPolicy shop/dry-b", "allowed by AuthorizationPolicy shop/admins"},
		{"dry run that would deny", policy(false, forA, dryForB), inboundpolicy.Client{},
			"let through, reported as denied (dry run)", "let through, reported as denied (dry run)"},
		{"audit", policy(true), inboundpolicy.Client{ID: idA},
			"let through, reported as denied (audit)", "let through, reported as denied (audit)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := inboundpolicy.Connection(tc.policy, tc.client)
			if err != nil {
				t.Fatal(err)
			}
			if got := verdicts(conn); got != tc.conn {
				t.Errorf("connection\n got %s\nwant %s", got, tc.conn)
			}
			req, err := inboundpolicy.Route(tc.policy, 0, tc.client)
			if err != nil {
				t.Fatal(err)
			}
			if got := verdicts(req); got != tc.admin {
				t.Errorf("request on the route\n got %s\nwant %s", got, tc.admin)
			}
			for _, v := range req {
				if v.Route == nil || v.Route.Name != "admin" {
					t.Errorf("verdict on route %v, want HTTPRoute admin", v.Route)
				}
			}
		})
	}
}

// TestRequestMatches: Request takes the route the request matches, as
// the proxy does, and leaves the policy as it was.
func TestRequestMatches(t *testing.T) {
	p := &pb.InboundPolicy{Server: &pb.ResourceRef{Kind: "Server", Namespace: "shop", Name: "web"}, Routes: []*pb.InboundRoute{
		{Ref: &pb.ResourceRef{Kind: "HTTPRoute", Namespace: "shop", Name: "public"}, Matches: []*pb.RouteMatch{{Path: &pb.PathMatch{Kind: pb.PathMatch_PREFIX, Value: "/public"}}},
			Authorizations: []*pb.Authorization{{Ref: ap("all")}}},
	}}
	for target, want := range map[string]string{
		"/public/x": "allowed by AuthorizationPolicy shop/all",
		"/private":  "denied: no route matches (404)",
	} {
		vs, err := inboundpolicy.Request(p, routes.Request{Method: "GET", Target: target}, inboundpolicy.Client{})
		if err != nil {
			t.Fatal(err)
		}
		if got := verdicts(vs); got != want {
			t.Errorf("GET %s: %s, want %s", target, got, want)
		}
	}
	if _, err := inboundpolicy.Route(p, 0, inboundpolicy.Client{}); err != nil || p.Routes[0].Matches == nil {
		t.Errorf("Route: %v, or it changed the policy it was given", err)
	}
}
