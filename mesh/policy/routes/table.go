package routes

import (
	"math/bits"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
)

// Table is the compiled route table of one destination. It is immutable and
// safe for concurrent use.
type Table struct {
	// Parent is the Service port the routes belong to (parent_* metric
	// labels); never nil.
	Parent *destinationpb.ResourceRef
	// Routes are the routes of the policy in its order, each with the rules
	// that compiled.
	Routes []*Route

	// ordered holds every (rule, match) in the order Match tries them when
	// the table has no host index: the policy's order for a ServiceProfile,
	// else ranked by precedence (all routes then have no hostnames).
	ordered []entry
	// hosts is set when some route lists hostnames and the policy is not a
	// ServiceProfile.
	hosts *hostIndex
	// profile: first match in the listed order, hostnames checked per entry.
	profile bool
	// pathSensitive: some match tells paths apart (anything but a prefix
	// of "/"), so an ambiguous path is refused (PathSensitive).
	pathSensitive bool
	// needsMore: some rule is not Plain (Plain).
	needsMore bool
}

// Plain reports whether every rule of the table is Plain: a request to
// the destination then needs nothing but a backend choice, whichever rule
// it matches. A nil table is plain.
func (t *Table) Plain() bool { return t == nil || !t.needsMore }

// PathSensitive reports whether the table's matches tell paths apart:
// the proxy then refuses a request whose path is ambiguous (pathnorm).
func (t *Table) PathSensitive() bool { return t.pathSensitive }

// Route is one route of the policy.
type Route struct {
	// Ref names the route (route_* metric labels); never nil.
	Ref *destinationpb.ResourceRef
	// GRPC: a GRPCRoute (outbound_grpc_route_* metrics). It matches gRPC
	// requests only; an HTTP route matches gRPC requests too.
	GRPC bool
	// Rules that compiled, in the policy's order (Rule.Index keeps their
	// place in the policy, so a dropped rule leaves a gap).
	Rules []*Rule
	// Series is the caller's per-route state (the proxy's metric
	// series), set once before the table is used.
	Series any

	hostnames []hostname
}

// Rule is one rule of a route: what to do with the requests it matches.
type Rule struct {
	Route *Route
	// Index is the rule's index in the route of the policy.
	Index int
	// Backends in the policy's order. None: the request is answered 500
	// (unless the rule redirects).
	Backends []*Backend
	Timeouts Timeouts
	// Retry is nil when the rule does not retry.
	Retry *RetryPolicy
	// Plain reports that the rule needs nothing but a backend choice: no
	// filters (rule or backend), no timeouts, no retry. The caller still
	// handles PickBackend returning nil and Backend.Failure.
	Plain bool

	matches     []*match // in the policy's order; one catch-all for none
	totalWeight uint64
	classes     []responseClass
	filters     filterChain
	redirect    *redirect
}

// Timeouts of a rule; zero means none.
type Timeouts struct {
	// Request bounds the whole request: every attempt and the response body.
	Request time.Duration
	// Response bounds one attempt, from the request sent to the response's end.
	Response time.Duration
	// Idle: no bytes either way for this long.
	Idle time.Duration
}

// Backend is one weighted backend of a rule.
type Backend struct {
	// Ref names the backend (backend_* metric labels); never nil.
	Ref *destinationpb.ResourceRef
	// Authority is what to resolve ("<svc>.<ns>.svc.<domain>:<port>"); ""
	// means the request's original destination.
	Authority string
	// Failure, when set, is the message of the 500 that answers every
	// request sent to this backend.
	Failure string
	// Weight relative to the rule's other backends.
	Weight uint32
	// Series is the caller's per-backend state, as Route.Series.
	Series any
	// Accrual, when set, is the failure accrual (circuit breaking) of the
	// parent Service, for the balancer of this backend's endpoints.
	Accrual *accrual.Config
	// LocalZone, when set, turns zone-aware balancing on for this
	// backend's endpoints: those whose zone label is LocalZone are
	// preferred (the parent Service's ZoneAware).
	LocalZone string

	filters filterChain
}

// PickBackend chooses a backend with probability proportional to its
// weight, from rnd (e.g. math/rand/v2.Uint64()). A backend of weight 0 is
// never chosen; when the rule has no backends or all weigh 0 it returns nil.
func (r *Rule) PickBackend(rnd uint64) *Backend {
	if r.totalWeight == 0 {
		return nil
	}
	if len(r.Backends) == 1 {
		return r.Backends[0]
	}
	// x is uniform in [0, totalWeight) up to a bias of totalWeight/2^64.
	x, _ := bits.Mul64(rnd, r.totalWeight)
	for _, b := range r.Backends {
		if x < uint64(b.Weight) {
			return b
		}
		x -= uint64(b.Weight)
	}
	return nil // unreachable: x < totalWeight
}

// PickBackendWhere is PickBackend among the backends ok accepts (nil
// when it accepts none of weight above 0). It allocates nothing.
func (r *Rule) PickBackendWhere(rnd uint64, ok func(*Backend) bool) *Backend {
	var total uint64
	for _, b := range r.Backends {
		if ok(b) {
			total += uint64(b.Weight)
		}
	}
	if total == 0 {
		return nil
	}
	x, _ := bits.Mul64(rnd, total)
	for _, b := range r.Backends {
		if !ok(b) {
			continue
		}
		if x < uint64(b.Weight) {
			return b
		}
		x -= uint64(b.Weight)
	}
	return nil // unreachable: x < total
}

// Default returns the table of a destination with no policy: one route
// (kind "default", name "http") with one rule that matches every request
// and sends it, unfiltered and without retries or timeouts, to one backend
// with an empty Authority: the original destination.
func Default() *Table {
	route := &Route{Ref: &destinationpb.ResourceRef{Kind: "default", Name: "http"}}
	all := catchAll()
	rule := &Rule{
		Route:       route,
		Plain:       true,
		matches:     []*match{all},
		totalWeight: 1,
		Backends: []*Backend{{
			Ref:    &destinationpb.ResourceRef{Kind: "default", Name: "http"},
			Weight: 1,
		}},
	}
	route.Rules = []*Rule{rule}
	return &Table{
		Parent:  &destinationpb.ResourceRef{},
		Routes:  []*Route{route},
		ordered: []entry{{rule: rule, m: all}},
	}
}
