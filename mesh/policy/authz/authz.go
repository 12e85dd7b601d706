// Package authz decides who may talk to a pod's port: the inbound policy
// destination streams for the port (ARCHITECTURE.md §9), compiled once per
// update, asked once per connection and per HTTP request. It does no I/O
// and allocates nothing per decision.
package authz

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/ratelimit"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
)

// Client is who is asking.
type Client struct {
	Addr netip.Addr
	// ID is the SPIFFE ID the client's proxy proved over mesh mTLS; ""
	// for a plaintext client.
	ID string
}

// Policy is the compiled inbound policy of one port. It is immutable and
// safe for concurrent use.
type Policy struct {
	// Server names the Server or the default policy (srv_* labels).
	Server *destinationpb.ResourceRef
	// Protocol is the Server's proxyProtocol ("unknown": detect).
	Protocol string
	// Audit: nothing is denied; what would be is reported.
	Audit bool
	// RateLimit, when set, limits the port's HTTP requests.
	RateLimit *destinationpb.RateLimit

	limit  *ratelimit.Limit // RateLimit's buckets; nil: none
	authzs []*Authorization // the port's
	routes *routes.Table    // nil: every request is on the default route
	// byRoute holds each route's authorizations, by the route's place in
	// routes.Routes.
	byRoute map[*routes.Route]*route
}

type route struct {
	ref    *destinationpb.ResourceRef
	authzs []*Authorization
}

// Authorization is one compiled authorization.
type Authorization struct {
	// Ref names it (authz_* labels).
	Ref    *destinationpb.ResourceRef
	DryRun bool

	networks   []network
	meshTLS    bool
	identities map[string]struct{}
	prefixes   []string
}

type network struct {
	prefix netip.Prefix
	except []netip.Prefix
}

// defaultRoute names requests on a port without routes (route_* labels).
var defaultRoute = &destinationpb.ResourceRef{Kind: "default", Name: "default"}

// Compile turns the policy destination sent into a Policy. An
// authorization or route that does not compile is left out and reported
// in the error (leaving it out denies what it would allow: fail closed).
func Compile(p *destinationpb.InboundPolicy) (*Policy, error) {
	out := &Policy{Server: p.GetServer(), Protocol: p.GetProtocol(), Audit: p.GetAudit(), RateLimit: p.GetRateLimit()}
	if out.Server == nil {
		out.Server = &destinationpb.ResourceRef{Kind: "default"}
	}
	if out.Protocol == "" {
		out.Protocol = "unknown"
	}
	var errs []string
	out.authzs = compileAll(p.GetAuthorizations(), &errs)
	if rl := p.GetRateLimit(); rl != nil {
		overrides := map[string]uint32{}
		for _, o := range rl.GetOverrides() {
			for _, id := range o.GetIdentities() {
				overrides[id] = o.GetRequestsPerSecond()
			}
		}
		out.limit = ratelimit.NewLimit(rl.GetTotalPerSecond(), rl.GetIdentityPerSecond(), overrides)
	}
	if len(p.GetRoutes()) > 0 {
		// The routes' matching is the outbound routes' (Gateway API
		// precedence): each route becomes a route with one rule.
		op := &destinationpb.OutboundPolicy{Parent: out.Server}
		for _, r := range p.GetRoutes() {
			proto := destinationpb.OutboundRoute_HTTP
			if r.GetRef().GetKind() == "GRPCRoute" {
				proto = destinationpb.OutboundRoute_GRPC
			}
			op.Routes = append(op.Routes, &destinationpb.OutboundRoute{Ref: r.GetRef(), Protocol: proto,
				Rules: []*destinationpb.OutboundRule{{Matches: r.GetMatches()}}})
		}
		t, err := routes.Compile(op)
		if err != nil {
			errs = append(errs, err.Error())
		}
		out.routes = t
		out.byRoute = map[*routes.Route]*route{}
		byRef := map[*destinationpb.ResourceRef]*destinationpb.InboundRoute{}
		for _, r := range p.GetRoutes() {
			byRef[r.GetRef()] = r
		}
		for _, r := range t.Routes {
			if src := byRef[r.Ref]; src != nil {
				out.byRoute[r] = &route{ref: src.GetRef(), authzs: compileAll(src.GetAuthorizations(), &errs)}
			}
		}
	}
	if len(errs) > 0 {
		return out, fmt.Errorf("inbound policy of %s/%s: left out: %s", out.Server.GetNamespace(), out.Server.GetName(), strings.Join(errs, "; "))
	}
	return out, nil
}

func compileAll(in []*destinationpb.Authorization, errs *[]string) []*Authorization {
	var out []*Authorization
	for _, a := range in {
		c, err := compileAuthorization(a)
		if err != nil {
			*errs = append(*errs, err.Error())
			continue
		}
		out = append(out, c)
	}
	return out
}

func compileAuthorization(a *destinationpb.Authorization) (*Authorization, error) {
	c := &Authorization{Ref: a.GetRef(), DryRun: a.GetDryRun(), meshTLS: a.GetMeshTls(), prefixes: a.GetPrefixes()}
	if c.Ref == nil {
		c.Ref = &destinationpb.ResourceRef{}
	}
	for _, n := range a.GetNetworks() {
		p, err := netip.ParsePrefix(n.GetCidr())
		if err != nil {
			return nil, fmt.Errorf("authorization %s: network %q: %w", c.Ref.GetName(), n.GetCidr(), err)
		}
		nw := network{prefix: p.Masked()}
		for _, e := range n.GetExcept() {
			ep, err := netip.ParsePrefix(e)
			if err != nil {
				return nil, fmt.Errorf("authorization %s: except %q: %w", c.Ref.GetName(), e, err)
			}
			nw.except = append(nw.except, ep.Masked())
		}
		c.networks = append(c.networks, nw)
	}
	if ids := a.GetIdentities(); len(ids) > 0 {
		c.identities = make(map[string]struct{}, len(ids))
		for _, id := range ids {
			c.identities[id] = struct{}{}
		}
	}
	return c, nil
}

// allows reports whether a lets c in.
func (a *Authorization) allows(c *Client) bool {
	if len(a.networks) > 0 && !inNetworks(a.networks, c.Addr) {
		return false
	}
	if !a.meshTLS {
		return true
	}
	if c.ID == "" {
		return false
	}
	if a.identities == nil && a.prefixes == nil {
		return true // any mesh identity
	}
	if _, ok := a.identities[c.ID]; ok {
		return true
	}
	for _, p := range a.prefixes {
		if strings.HasPrefix(c.ID, p) {
			return true
		}
	}
	return false
}

func inNetworks(ns []network, ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, n := range ns {
		if !n.prefix.Contains(ip) {
			continue
		}
		excluded := false
		for _, e := range n.except {
			if e.Contains(ip) {
				excluded = true
				break
			}
		}
		if !excluded {
			return true
		}
	}
	return false
}
