package inboundpolicy

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"google.golang.org/protobuf/proto"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/policy/authz"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
)

// Client is who asks.
type Client struct {
	// ID is the client's mesh identity; "" for a plaintext client.
	ID string
	// Addr is the client's address; invalid when unknown: then the
	// networks of authorizations become conditions (Verdict.IfFrom).
	Addr netip.Addr
}

// Results of a Verdict.
const (
	Allowed = "allowed"
	Denied  = "denied"
	// NoRoute: denied, the port has routes and none matches (404).
	NoRoute = "no-route"
	// Audit: denied, but let through and reported (the policy is audit).
	Audit = "audit"
	// DryRun: denied, but let through and reported (a dry-run
	// AuthorizationPolicy applies; Authorization, if set, would allow it).
	DryRun = "dry-run"
)

// Verdict is what a client gets.
type Verdict struct {
	Result string `json:"result"`
	// Route is the route a request is on; nil for a connection.
	Route *Ref `json:"route,omitempty"`
	// Authorization allowed it (DryRun: the dry-run one that would).
	Authorization *Ref `json:"authorization,omitempty"`
	// IfFrom, when the client's address is unknown: the verdict holds if
	// it is in one of these networks; the next verdict holds otherwise.
	IfFrom []Network `json:"ifFrom,omitempty"`
}

// Ref names an object, or (kind default) what destination makes up.
type Ref struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// RefOf converts a policy's reference.
func RefOf(r *pb.ResourceRef) Ref {
	return Ref{Group: r.GetGroup(), Kind: r.GetKind(), Namespace: r.GetNamespace(), Name: r.GetName()}
}

func refPtr(r *pb.ResourceRef) *Ref {
	if r == nil {
		return nil
	}
	ref := RefOf(r)
	return &ref
}

// String is "Kind ns/name", or "default name".
func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// String describes v in words.
func (v Verdict) String() string {
	var s string
	switch v.Result {
	case Allowed:
		s = "allowed by " + v.Authorization.String()
	case NoRoute:
		s = "denied: no route matches (404)"
	case Audit:
		s = "let through, reported as denied (audit)"
	case DryRun:
		s = "let through, reported as denied (dry run)"
		if v.Authorization != nil {
			s = "let through, reported as allowed by the dry-run " + v.Authorization.String()
		}
	default:
		s = "denied"
	}
	if len(v.IfFrom) > 0 {
		from := make([]string, len(v.IfFrom))
		for i, n := range v.IfFrom {
			from[i] = n.String()
		}
		s = "from " + strings.Join(from, " or ") + ": " + s
	}
	return s
}

// Connection evaluates a connection from c whose HTTP the proxy does not
// see (opaque TCP, TLS it does not terminate): by the port's
// authorizations (authz.Policy.Connection). The error names what did
// not compile (left out: fail closed, as in the proxy).
func Connection(p *pb.InboundPolicy, c Client) ([]Verdict, error) {
	return evaluate(p, c, func(pol *authz.Policy, cl *authz.Client) authz.Decision { return pol.Connection(cl) })
}

// Request evaluates req from c as the proxy does
// (authz.Policy.Request): on the route it matches.
func Request(p *pb.InboundPolicy, req routes.Request, c Client) ([]Verdict, error) {
	return evaluate(p, c, func(pol *authz.Policy, cl *authz.Client) authz.Decision {
		r := req
		return pol.Request(cl, &r)
	})
}

// Route evaluates a request from c on p's route i, whatever its matches
// (and whether or not another route would take it first).
func Route(p *pb.InboundPolicy, i int, c Client) ([]Verdict, error) {
	one := proto.Clone(p).(*pb.InboundPolicy)
	r := one.Routes[i]
	r.Matches = nil // a rule without matches takes every request
	one.Routes = []*pb.InboundRoute{r}
	grpc := r.GetRef().GetKind() == policyv1alpha1.GRPCRouteKind
	return Request(one, routes.Request{Method: "GET", Target: "/", GRPC: grpc}, c)
}

// evaluate decides with the policy compiled as the proxy compiles it.
// Without the client's address, the networks of every authorization are
// conditions: it decides as if the client were in all of them, and when
// the authorization that decided has networks, says so and decides again
// without it (an authorization with networks never admits the unknown
// address), until one without networks (or none) decides.
func evaluate(p *pb.InboundPolicy, c Client, decide func(*authz.Policy, *authz.Client) authz.Decision) ([]Verdict, error) {
	client := &authz.Client{ID: c.ID, Addr: c.Addr}
	if c.Addr.IsValid() {
		pol, err := authz.Compile(p)
		return []Verdict{verdict(p, decide(pol, client))}, err
	}
	work := proto.Clone(p).(*pb.InboundPolicy)
	byRef := map[*pb.ResourceRef]*pb.Authorization{}
	networks := map[*pb.Authorization][]*pb.Network{}
	all := work.Authorizations
	for _, r := range work.Routes {
		all = append(all, r.Authorizations...)
	}
	for _, a := range all {
		if a.GetRef() == nil {
			continue // compiled with a fresh ref: no decision names it
		}
		byRef[a.GetRef()] = a
		if len(a.Networks) > 0 {
			networks[a], a.Networks = a.Networks, nil
		}
	}
	var out []Verdict
	var firstErr error
	for {
		pol, err := authz.Compile(work)
		if firstErr == nil {
			firstErr = err
		}
		d := decide(pol, client)
		v := verdict(work, d)
		a := byRef[d.Authz]
		nets, conditional := networks[a]
		if a == nil || !conditional {
			return append(out, v), firstErr
		}
		v.IfFrom = NetworksOf(nets)
		out = append(out, v)
		a.Networks = nets
		delete(networks, a)
	}
}

func verdict(p *pb.InboundPolicy, d authz.Decision) Verdict {
	v := Verdict{Route: refPtr(d.Route), Authorization: refPtr(d.Authz)}
	switch {
	case d.NoRoute:
		v.Result = NoRoute
	case d.DryRun && p.GetAudit():
		v.Result, v.Authorization = Audit, nil
	case d.DryRun:
		v.Result = DryRun
	case d.Allowed:
		v.Result = Allowed
	default:
		v.Result = Denied
	}
	return v
}

// Network is a client network: CIDR, less the Except ones.
type Network struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

// String is "CIDR" or "CIDR except CIDR,CIDR".
func (n Network) String() string {
	if len(n.Except) == 0 {
		return n.CIDR
	}
	return n.CIDR + " except " + strings.Join(n.Except, ",")
}

// NetworksOf converts a policy's networks.
func NetworksOf(ns []*pb.Network) []Network {
	if len(ns) == 0 {
		return nil
	}
	out := make([]Network, len(ns))
	for i, n := range ns {
		out[i] = Network{CIDR: n.GetCidr(), Except: n.GetExcept()}
	}
	return out
}

// RateLimit describes the requests per second client id may send to the
// port, as the proxy counts them (mesh/policy/ratelimit): by its own bucket
// (its override, the last one naming it, else the per-identity share;
// plaintext clients share one) and the total; requests on the probe
// route are never limited. "" without a limit.
func RateLimit(p *pb.InboundPolicy, id string) string {
	rl := p.GetRateLimit()
	if rl == nil {
		return ""
	}
	var parts []string
	override := uint32(0)
	for _, o := range rl.GetOverrides() {
		if slices.Contains(o.GetIdentities(), id) {
			override = o.GetRequestsPerSecond()
		}
	}
	switch {
	case override > 0:
		parts = append(parts, fmt.Sprintf("%d/s (its override)", override))
	case rl.GetIdentityPerSecond() > 0 && id == "":
		parts = append(parts, fmt.Sprintf("%d/s (the per-identity share, for all plaintext clients together)", rl.GetIdentityPerSecond()))
	case rl.GetIdentityPerSecond() > 0:
		parts = append(parts, fmt.Sprintf("%d/s (the per-identity share)", rl.GetIdentityPerSecond()))
	}
	if rl.GetTotalPerSecond() > 0 {
		parts = append(parts, fmt.Sprintf("%d/s for all clients together", rl.GetTotalPerSecond()))
	}
	if len(parts) == 0 {
		return "no limit"
	}
	for _, r := range p.GetRoutes() {
		if authz.IsProbeRoute(r.GetRef()) {
			parts = append(parts, "none on the probe route")
			break
		}
	}
	return strings.Join(parts, ", ")
}
