package authz

import (
	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/pathnorm"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
)

// Decision is the outcome of authorizing a connection or a request.
type Decision struct {
	// Allowed: let it through. A denial in audit or dry run is allowed
	// and reported (Denied and DryRun set).
	Allowed bool
	// Denied: the policy does not authorize it.
	Denied bool
	// DryRun: Denied is reported, not enforced (the policy is in audit,
	// or a dry-run authorization applies to the target).
	DryRun bool
	// NoRoute: the port has routes and none matches the request (404).
	NoRoute bool
	// InvalidPath: the port has routes and the request's path is
	// ambiguous or badly encoded (pathnorm), so which route it is on
	// depends on the application: refused (400), whatever the policy's
	// mode. Denied is set too.
	InvalidPath string
	// RateLimited: allowed, but over the port's rate limit (429); set by
	// the caller after Admit.
	RateLimited bool
	// Route is the route the request is on (route_* labels); nil for a
	// connection.
	Route *destinationpb.ResourceRef
	// Authz is the authorization that allowed it (authz_* labels); nil
	// when denied (or, in a dry run, the dry-run one that would allow).
	Authz *destinationpb.ResourceRef
}

// Admit reports whether the port's rate limit admits a request from c at
// now (monotonic nanoseconds); true without a limit. Buckets start afresh
// with each policy update.
func (p *Policy) Admit(c *Client, now int64) bool {
	return p.limit == nil || p.limit.Allow(c.ID, now)
}

// Connection authorizes a connection that carries no HTTP the proxy can
// see (opaque TCP, TLS it does not terminate): by the port's
// authorizations.
func (p *Policy) Connection(c *Client) Decision {
	return p.decide(c, nil, nil)
}

// Request authorizes an HTTP request: by the authorizations of the route
// it is on and the port's.
func (p *Policy) Request(c *Client, req *routes.Request) Decision {
	if p.routes == nil {
		return p.decide(c, defaultRoute, nil)
	}
	if why := invalidPath(req.Target); why != "" {
		// The application may read it as another route's path than the
		// one it matches here (/public/../admin, /admin;x).
		return Decision{Denied: true, InvalidPath: why}
	}
	rule, ok := p.routes.Match(req)
	if !ok {
		return Decision{NoRoute: true, Denied: true}
	}
	r := p.byRoute[rule.Route]
	if r == nil {
		return Decision{NoRoute: true, Denied: true}
	}
	return p.decide(c, r.ref, r.authzs)
}

// decide runs the route's authorizations, then the port's: the first
// enforced one that allows c decides. Dry-run ones never allow; their
// presence turns a denial into a reported one.
func (p *Policy) decide(c *Client, routeRef *destinationpb.ResourceRef, routeAuthzs []*Authorization) Decision {
	var dry *Authorization
	hasDry := false
	for _, list := range [2][]*Authorization{routeAuthzs, p.authzs} {
		for _, a := range list {
			if a.DryRun {
				hasDry = true
				if dry == nil && a.allows(c) {
					dry = a
				}
				continue
			}
			if a.allows(c) {
				return Decision{Allowed: true, Route: routeRef, Authz: a.Ref}
			}
		}
	}
	d := Decision{Denied: true, Route: routeRef}
	if p.Audit || hasDry {
		d.Allowed, d.DryRun = true, true
		if dry != nil {
			d.Authz = dry.Ref
		}
	}
	return d
}

// MayConnect reports whether c may keep an HTTP connection to the port:
// some enforced authorization, of the port or of a route other than the
// probe route, lets it in, or nothing would be enforced (audit, dry run). A policy change that makes
// it false closes c's live connections.
func (p *Policy) MayConnect(c *Client) bool {
	if p.Audit {
		return true
	}
	lists := [][]*Authorization{p.authzs}
	for _, r := range p.byRoute {
		if IsProbeRoute(r.ref) {
			continue // the probe paths admit anyone: that keeps no connection
		}
		lists = append(lists, r.authzs)
	}
	for _, list := range lists {
		for _, a := range list {
			if a.DryRun || a.allows(c) {
				return true
			}
		}
	}
	return false
}

// IsProbeRoute reports whether ref is the probe route destination adds
// for the pod's own probes.
func IsProbeRoute(ref *destinationpb.ResourceRef) bool {
	return ref.GetKind() == "default" && ref.GetName() == "probe" && ref.GetGroup() == ""
}

// invalidPath returns why target, put in normal form, is refused where
// routes decide (pathnorm), or "".
func invalidPath(target string) string {
	t, err := pathnorm.Target(target)
	if err != nil {
		return pathnorm.InvalidEncoding
	}
	return pathnorm.Ambiguous(t)
}
