package routes

import (
	"errors"
	"fmt"
	"math"
	"net/textproto"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
	"github.com/plexus-mesh/plexus/mesh/policy/pathnorm"
)

// RuleError is one rule (Rule -1: a whole route) that Compile dropped.
type RuleError struct {
	Route *destinationpb.ResourceRef
	Rule  int
	Err   error
}

func (e *RuleError) Error() string {
	ref := e.Route
	where := fmt.Sprintf("route %s %s/%s", ref.GetKind(), ref.GetNamespace(), ref.GetName())
	if e.Rule >= 0 {
		where += fmt.Sprintf(" rule %d", e.Rule)
	}
	return where + ": " + e.Err.Error()
}

func (e *RuleError) Unwrap() error { return e.Err }

// Compile builds the table of a policy (nil: Default()). A rule that does
// not compile (a bad regexp, a filter with nothing set, …) is dropped and
// the rest works; a route with a bad hostname is dropped whole. The error
// joins one *RuleError per dropped rule or route.
func Compile(p *destinationpb.OutboundPolicy) (*Table, error) {
	if p == nil {
		return Default(), nil
	}
	parent := p.GetParent()
	if parent == nil {
		parent = &destinationpb.ResourceRef{}
	}
	c := compiler{
		table:   &Table{Parent: parent, profile: p.Source == "serviceprofile"},
		budgets: map[budgetKey]*Budget{},
	}
	var entries []entry
	for ri, pRoute := range p.Routes {
		route := &Route{Ref: pRoute.GetRef(), GRPC: pRoute.GetProtocol() == destinationpb.OutboundRoute_GRPC}
		if route.Ref == nil {
			route.Ref = &destinationpb.ResourceRef{}
		}
		hs, err := compileHostnames(pRoute.GetHostnames())
		if err != nil {
			c.errs = append(c.errs, &RuleError{route.Ref, -1, err})
			continue
		}
		route.hostnames = hs
		c.table.Routes = append(c.table.Routes, route)
		for i, pRule := range pRoute.GetRules() {
			rule, ms, err := c.rule(route, ri, i, pRule)
			if err != nil {
				c.errs = append(c.errs, &RuleError{route.Ref, i, err})
				continue
			}
			rule.matches = ms
			route.Rules = append(route.Rules, rule)
			c.table.needsMore = c.table.needsMore || !rule.Plain
			for _, m := range ms {
				entries = append(entries, entry{rule: rule, m: m})
				c.table.pathSensitive = c.table.pathSensitive || m.tellsPathsApart()
			}
		}
	}
	c.table.index(entries)
	c.table.sendParentToDestination()
	if fa := p.GetFailureAccrual(); fa != nil {
		acc, err := compileAccrual(fa)
		if err != nil {
			c.errs = append(c.errs, err) // balanced without accrual
		}
		c.table.setAccrual(acc)
	}
	if z := p.GetZoneAware().GetLocalZone(); z != "" {
		c.table.eachBackend(func(b *Backend) { b.LocalZone = z })
	}
	return c.table, errors.Join(c.errs...)
}

// compileAccrual converts the parent's failure accrual; nil with an
// error when the values are unusable.
func compileAccrual(fa *destinationpb.FailureAccrual) (*accrual.Config, error) {
	c := accrual.Config{
		ConsecutiveFailures: int(min(fa.GetConsecutiveFailures(), math.MaxInt32)),
		MinPenalty:          fa.GetMinPenalty().AsDuration(),
		MaxPenalty:          fa.GetMaxPenalty().AsDuration(),
		JitterRatio:         fa.GetJitterRatio(),
		MinHealthyPercent:   int(min(fa.GetMinHealthyPercent(), math.MaxInt32)),
	}
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("failure accrual left off: %w", err)
	}
	return &c, nil
}

// setAccrual gives every backend the parent's failure accrual.
func (t *Table) setAccrual(acc *accrual.Config) {
	t.eachBackend(func(b *Backend) { b.Accrual = acc })
}

// eachBackend calls f with every backend of every rule.
func (t *Table) eachBackend(f func(*Backend)) {
	for _, r := range t.Routes {
		for _, rule := range r.Rules {
			for _, b := range rule.Backends {
				f(b)
			}
		}
	}
}

// sendParentToDestination clears the Authority of the backends that are
// the parent Service itself: their requests go to the original
// destination, whose endpoints are the same, and which still works when
// the control plane cannot be asked.
func (t *Table) sendParentToDestination() {
	p := t.Parent
	if p.GetName() == "" {
		return
	}
	for _, r := range t.Routes {
		for _, rule := range r.Rules {
			for _, b := range rule.Backends {
				if b.Ref.GetKind() == p.GetKind() && b.Ref.GetNamespace() == p.GetNamespace() &&
					b.Ref.GetName() == p.GetName() && b.Ref.GetPort() == p.GetPort() {
					b.Authority = ""
				}
			}
		}
	}
}

type compiler struct {
	table   *Table
	budgets map[budgetKey]*Budget
	errs    []error
}

// budgetKey: budgets with the same parameters are shared within a route
// (route -1: within the table, for a ServiceProfile).
type budgetKey struct {
	route        int
	ratio        float64
	minPerSecond uint32
	ttl          time.Duration
	defaulted    bool
}

func compileHostnames(names []string) ([]hostname, error) {
	var out []hostname
	seen := map[hostname]bool{}
	for _, n := range names {
		n = strings.ToLower(strings.TrimSuffix(n, "."))
		h := hostname{name: n}
		if rest, ok := strings.CutPrefix(n, "*"); ok {
			h = hostname{name: rest, wildcard: true}
		}
		if h.name == "" || strings.Contains(h.name, "*") || h.wildcard && (len(h.name) < 2 || h.name[0] != '.') {
			return nil, fmt.Errorf("hostname %q", n)
		}
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	return out, nil
}

func (c *compiler) rule(route *Route, ri, index int, pr *destinationpb.OutboundRule) (*Rule, []*match, error) {
	var errs []error
	rule := &Rule{Route: route, Index: index}
	// A GRPCRoute matches gRPC requests only; the default route of a gRPC
	// port takes every request (its metrics are gRPC's), as before routes.
	grpcOnly := route.GRPC && route.Ref.GetKind() != "default"
	var ms []*match
	for i, pm := range pr.GetMatches() {
		m, err := compileMatch(pm)
		if err != nil {
			errs = append(errs, fmt.Errorf("match %d: %w", i, err))
			continue
		}
		m.grpcOnly = grpcOnly
		ms = append(ms, m)
	}
	if len(pr.GetMatches()) == 0 {
		m := catchAll()
		m.grpcOnly = grpcOnly
		ms = append(ms, m)
	}
	filters, rd, usesPrefix, err := compileFilters(pr.GetFilters(), false)
	if err != nil {
		errs = append(errs, err)
	}
	rule.filters, rule.redirect = filters, rd
	plainBackends := true
	for i, pb := range pr.GetBackends() {
		b := &Backend{Ref: pb.GetRef(), Authority: pb.GetAuthority(), Failure: pb.GetFailure(), Weight: pb.GetWeight()}
		if b.Ref == nil {
			b.Ref = &destinationpb.ResourceRef{}
		}
		var bPrefix bool
		b.filters, _, bPrefix, err = compileFilters(pb.GetFilters(), true)
		if err != nil {
			errs = append(errs, fmt.Errorf("backend %d: %w", i, err))
		}
		usesPrefix = usesPrefix || bPrefix
		plainBackends = plainBackends && b.filters.empty()
		rule.Backends = append(rule.Backends, b)
		rule.totalWeight += uint64(b.Weight)
	}
	if usesPrefix {
		for i, m := range ms {
			if m.kind != pathPrefix {
				errs = append(errs, fmt.Errorf("match %d: a prefix replacement needs a PathPrefix match", i))
			}
		}
	}
	if rule.Timeouts, err = compileTimeouts(pr.GetTimeouts()); err != nil {
		errs = append(errs, err)
	}
	for i, pc := range pr.GetResponseClasses() {
		cond, err := compileResponseCond(pc.GetCondition())
		if err != nil {
			errs = append(errs, fmt.Errorf("response class %d: %w", i, err))
			continue
		}
		rule.classes = append(rule.classes, responseClass{cond: cond, failure: pc.GetIsFailure()})
	}
	if pr.GetRetry() != nil {
		if rule.Retry, err = c.retry(rule, ri, pr.GetRetry()); err != nil {
			errs = append(errs, fmt.Errorf("retry: %w", err))
		}
	}
	rule.Plain = filters.empty() && rd == nil && plainBackends && rule.Timeouts == (Timeouts{}) && rule.Retry == nil
	if err := errors.Join(errs...); err != nil {
		return nil, nil, err
	}
	return rule, ms, nil
}

// tellsPathsApart reports whether m's outcome can depend on the path.
func (m *match) tellsPathsApart() bool {
	return m.kind != pathPrefix || m.path != "" || m.cond != nil
}

func compileMatch(pm *destinationpb.RouteMatch) (*match, error) {
	m := &match{kind: pathPrefix, rawPrefix: "/", method: pm.GetMethod()}
	switch path := pm.GetPath(); {
	case path == nil && pm.GetCondition() != nil:
		m.kind, m.rawPrefix = pathNone, ""
	case path == nil:
	case path.Kind == destinationpb.PathMatch_EXACT:
		// Compared as an application reads paths: decoded (pathnorm).
		m.kind, m.path, m.rawPrefix = pathExact, pathnorm.Decode(path.Value), ""
	case path.Kind == destinationpb.PathMatch_PREFIX:
		m.path, m.rawPrefix = strings.TrimRight(pathnorm.Decode(path.Value), "/"), path.Value
		if !strings.HasPrefix(path.Value, "/") {
			return nil, fmt.Errorf("path prefix %q does not start with /", path.Value)
		}
	case path.Kind == destinationpb.PathMatch_REGEX:
		re, err := compilePathRegexp(path.Value)
		if err != nil {
			return nil, fmt.Errorf("path regex: %w", err)
		}
		m.kind, m.re, m.rawPrefix = pathRegex, re, ""
	default:
		return nil, fmt.Errorf("path match kind %v", path.Kind)
	}
	for _, h := range pm.GetHeaders() {
		vm, err := compileValueMatch("header", textproto.CanonicalMIMEHeaderKey(h.GetName()), h.GetValue(), h.GetKind() == destinationpb.HeaderMatch_REGEX)
		if err != nil {
			return nil, err
		}
		m.headers = append(m.headers, vm)
	}
	for _, q := range pm.GetQuery() {
		vm, err := compileValueMatch("query parameter", q.GetName(), q.GetValue(), q.GetKind() == destinationpb.QueryMatch_REGEX)
		if err != nil {
			return nil, err
		}
		m.query = append(m.query, vm)
	}
	if pm.GetCondition() != nil {
		cond, err := compileCondition(pm.GetCondition())
		if err != nil {
			return nil, fmt.Errorf("condition: %w", err)
		}
		m.cond = cond
	}
	return m, nil
}

func compileValueMatch(what, name, value string, regex bool) (valueMatch, error) {
	vm := valueMatch{name: name, value: value}
	if name == "" {
		return vm, fmt.Errorf("%s match without a name", what)
	}
	if regex {
		var err error
		if vm.re, err = compileValueRegexp(value); err != nil {
			return vm, fmt.Errorf("%s %s regex: %w", what, name, err)
		}
	}
	return vm, nil
}

func compileCondition(pc *destinationpb.Condition) (*condition, error) {
	switch k := pc.GetKind().(type) {
	case *destinationpb.Condition_Method:
		return &condition{op: condMethod, method: k.Method}, nil
	case *destinationpb.Condition_PathRegex:
		re, err := compilePathRegexp(k.PathRegex)
		if err != nil {
			return nil, fmt.Errorf("path_regex: %w", err)
		}
		return &condition{op: condPath, re: re}, nil
	case *destinationpb.Condition_All:
		subs, err := compileEach(k.All.GetConditions(), compileCondition)
		return &condition{op: condAll, subs: subs}, err
	case *destinationpb.Condition_Any:
		subs, err := compileEach(k.Any.GetConditions(), compileCondition)
		return &condition{op: condAny, subs: subs}, err
	case *destinationpb.Condition_Not:
		sub, err := compileCondition(k.Not)
		return &condition{op: condNot, subs: []*condition{sub}}, err
	}
	return nil, errors.New("nothing set")
}

// compileEach compiles every element of a list, stopping at the first error.
func compileEach[P, C any](ps []P, compile func(P) (C, error)) ([]C, error) {
	out := make([]C, len(ps))
	for i, p := range ps {
		var err error
		if out[i], err = compile(p); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func compileTimeouts(t *destinationpb.Timeouts) (Timeouts, error) {
	var errs []error
	d := func(name string, pd *durationpb.Duration) time.Duration {
		if pd == nil {
			return 0
		}
		if err := pd.CheckValid(); err != nil || pd.AsDuration() < 0 {
			errs = append(errs, fmt.Errorf("timeout %s: invalid duration %v", name, pd))
			return 0
		}
		return pd.AsDuration()
	}
	out := Timeouts{Request: d("request", t.GetRequest()), Response: d("response", t.GetResponse()), Idle: d("idle", t.GetIdle())}
	return out, errors.Join(errs...)
}

func (c *compiler) retry(rule *Rule, route int, pr *destinationpb.RetryPolicy) (*RetryPolicy, error) {
	p := &RetryPolicy{Limit: int(pr.GetLimit()), Failures: pr.GetFailures(), rule: rule, grpcCodes: pr.GetGrpcCodes()}
	var errs []error
	for _, r := range pr.GetHttpStatuses() {
		s, err := compileRange(r)
		if err != nil {
			errs = append(errs, err)
		}
		p.statuses = append(p.statuses, s)
	}
	if at := pr.GetAttemptTimeout(); at != nil {
		if err := at.CheckValid(); err != nil || at.AsDuration() < 0 {
			errs = append(errs, fmt.Errorf("attempt_timeout: invalid duration %v", at))
		}
		p.AttemptTimeout = max(at.AsDuration(), 0)
	}
	pb := pr.GetBudget()
	if c.table.profile {
		route = -1
	}
	key := budgetKey{route: route, defaulted: pb == nil}
	if pb != nil {
		key.ratio, key.minPerSecond, key.ttl = pb.Ratio, pb.MinPerSecond, pb.Ttl.AsDuration()
	}
	if p.Budget = c.budgets[key]; p.Budget == nil {
		p.Budget = NewBudget(pb, nil)
		c.budgets[key] = p.Budget
	}
	return p, errors.Join(errs...)
}
