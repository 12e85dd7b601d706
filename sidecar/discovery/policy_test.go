package discovery

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
)

// policyClient is the destination client of newEnv with GetOutboundPolicy
// replaced by streams the test drives (Get still reaches the test server).
type policyClient struct {
	destinationpb.DestinationClient
	opened chan *policyStream
}

func (c *policyClient) GetOutboundPolicy(ctx context.Context, in *destinationpb.GetDestination, _ ...grpc.CallOption) (grpc.ServerStreamingClient[destinationpb.OutboundPolicy], error) {
	st := &policyStream{ctx: ctx, req: in, msgs: make(chan *destinationpb.OutboundPolicy, 16), errs: make(chan error, 1)}
	c.opened <- st
	return st, nil
}

// policyStream is one GetOutboundPolicy stream: Recv returns what the test
// sends, or fails when the test fails it or the client cancels.
type policyStream struct {
	grpc.ClientStream // unused
	ctx               context.Context
	req               *destinationpb.GetDestination
	msgs              chan *destinationpb.OutboundPolicy
	errs              chan error
}

func (s *policyStream) Recv() (*destinationpb.OutboundPolicy, error) {
	select {
	case p := <-s.msgs:
		return p, nil
	case err := <-s.errs:
		return nil, err
	case <-s.ctx.Done():
		return nil, status.FromContextError(s.ctx.Err()).Err()
	}
}

func (s *policyStream) Context() context.Context { return s.ctx }

// tableLog records the Instrument and Release calls of a Resolver.
type tableLog struct {
	mu        sync.Mutex
	inst, rel map[*routes.Table]int
	// onInstrument, when set, runs inside Instrument (before counting).
	onInstrument func(*routes.Table)
}

func (l *tableLog) count(m map[*routes.Table]int, t *routes.Table) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return m[t]
}

func (l *tableLog) instrumented(t *routes.Table) int { return l.count(l.inst, t) }
func (l *tableLog) released(t *routes.Table) int     { return l.count(l.rel, t) }

// policyEnv is newEnv with a tableLog, a log recorder and, unless real, the
// driven GetOutboundPolicy.
type policyEnv struct {
	*env
	pc   *policyClient
	tabs *tableLog
	logs *logRecorder
}

func newPolicyEnv(t *testing.T, realPolicy bool, mut func(*Options)) *policyEnv {
	pe := &policyEnv{tabs: &tableLog{inst: map[*routes.Table]int{}, rel: map[*routes.Table]int{}}, logs: &logRecorder{}}
	pe.env = newEnv(t, func(o *Options) {
		if !realPolicy {
			pe.pc = &policyClient{DestinationClient: o.Client, opened: make(chan *policyStream, 16)}
			o.Client = pe.pc
		}
		o.Log = slog.New(pe.logs)
		o.Instrument = func(tb *routes.Table) {
			if f := pe.tabs.onInstrument; f != nil {
				f(tb)
			}
			pe.tabs.mu.Lock()
			pe.tabs.inst[tb]++
			pe.tabs.mu.Unlock()
		}
		o.Release = func(tb *routes.Table) {
			pe.tabs.mu.Lock()
			pe.tabs.rel[tb]++
			pe.tabs.mu.Unlock()
		}
		if mut != nil {
			mut(o)
		}
	})
	return pe
}

// stream waits for the next GetOutboundPolicy stream, for dst.
func (pe *policyEnv) stream(dst netip.AddrPort) *policyStream {
	pe.t.Helper()
	select {
	case st := <-pe.pc.opened:
		if st.req.GetPath() != dst.String() {
			pe.t.Fatalf("policy stream for %q, want %q", st.req.GetPath(), dst)
		}
		return st
	case <-time.After(2 * time.Second):
		pe.t.Fatal("no GetOutboundPolicy stream opened")
		return nil
	}
}

// policyAsync calls Policy in a goroutine; the table arrives on the channel.
func (pe *policyEnv) policyAsync(dst netip.AddrPort) <-chan *routes.Table {
	ch := make(chan *routes.Table, 1)
	ctx, cancel := context.WithCancel(context.Background())
	pe.t.Cleanup(cancel)
	go func() { ch <- pe.r.Policy(ctx, dst) }()
	return ch
}

// subscribe makes the first Policy for svc, answers it p and returns the
// stream and the table.
func (pe *policyEnv) subscribe(p *destinationpb.OutboundPolicy) (*policyStream, *routes.Table) {
	got := pe.policyAsync(svc)
	st := pe.stream(svc)
	st.msgs <- p
	return st, <-got
}

func (pe *policyEnv) policy(dst netip.AddrPort) *routes.Table {
	return pe.r.Policy(context.Background(), dst)
}

// hasPolicySub reports whether the resolver still holds dst's policy.
func (pe *policyEnv) hasPolicySub(dst netip.AddrPort) bool {
	pe.r.mu.Lock()
	defer pe.r.mu.Unlock()
	_, ok := pe.r.policies[dst]
	return ok
}

var webParent = &destinationpb.ResourceRef{Group: "core", Kind: "Service", Namespace: "shop", Name: "web", Port: 80}

// httpRoute is an HTTPRoute of Service web named name whose rules send the
// given path prefixes (a "~" prefix: a regex instead) to web itself.
func httpRoute(name string, paths ...string) *destinationpb.OutboundRoute {
	r := &destinationpb.OutboundRoute{Ref: &destinationpb.ResourceRef{Group: "gateway.networking.k8s.io", Kind: "HTTPRoute", Namespace: "shop", Name: name}}
	for _, p := range paths {
		m := &destinationpb.PathMatch{Kind: destinationpb.PathMatch_PREFIX, Value: p}
		if re, ok := strings.CutPrefix(p, "~"); ok {
			m = &destinationpb.PathMatch{Kind: destinationpb.PathMatch_REGEX, Value: re}
		}
		r.Rules = append(r.Rules, &destinationpb.OutboundRule{
			Matches:  []*destinationpb.RouteMatch{{Path: m}},
			Backends: []*destinationpb.Backend{{Ref: webParent, Weight: 1, Authority: "web.shop.svc.cluster.local:80"}},
		})
	}
	return r
}

// webPolicy is Service web's policy with one route per name, each
// matching "/<name>".
func webPolicy(names ...string) *destinationpb.OutboundPolicy {
	p := &destinationpb.OutboundPolicy{Parent: webParent, Source: "httproute"}
	for _, n := range names {
		p.Routes = append(p.Routes, httpRoute(n, "/"+n))
	}
	return p
}

func routeNames(t *routes.Table) []string {
	var names []string
	for _, r := range t.Routes {
		names = append(names, r.Ref.GetName())
	}
	return names
}

// matchedRoute is the name of the route t gives a GET of path, "" for none.
func matchedRoute(t *routes.Table, path string) string {
	rule, ok := t.Match(&routes.Request{Method: "GET", Authority: "web.shop:80", Target: path})
	if !ok {
		return ""
	}
	return rule.Route.Ref.GetName()
}

func isTable(t *testing.T, got *routes.Table, names ...string) {
	t.Helper()
	if got == nil || !slices.Equal(routeNames(got), names) || got.Parent.GetName() != "web" {
		t.Fatalf("table routes = %v (nil: %v), want %v of parent web", routeNames(got), got == nil, names)
	}
}

// TestPolicyFirstWaitsForCompiledTable: the first Policy blocks until the
// first message and returns it compiled (and instrumented); later calls
// return the same table at once.
func TestPolicyFirstWaitsForCompiledTable(t *testing.T) {
	pe := newPolicyEnv(t, false, func(o *Options) { o.FirstTimeout = 5 * time.Second })
	got := pe.policyAsync(svc)
	st := pe.stream(svc)
	select {
	case tb := <-got:
		t.Fatalf("Policy returned %v before any message", routeNames(tb))
	case <-time.After(100 * time.Millisecond):
	}
	st.msgs <- webPolicy("checkout", "cart")
	var tb *routes.Table
	select {
	case tb = <-got:
	case <-time.After(time.Second):
		t.Fatal("Policy did not return after the first message")
	}
	isTable(t, tb, "checkout", "cart")
	if matchedRoute(tb, "/cart/1") != "cart" || matchedRoute(tb, "/other") != "" {
		t.Errorf("compiled table matches /cart/1 → %q, /other → %q", matchedRoute(tb, "/cart/1"), matchedRoute(tb, "/other"))
	}
	if n := pe.tabs.instrumented(tb); n != 1 {
		t.Errorf("Instrument called %d times on the table, want 1", n)
	}
	t0 := time.Now()
	if again := pe.policy(svc); again != tb {
		t.Errorf("second Policy returned another table: %v", routeNames(again))
	}
	if el := time.Since(t0); el > 100*time.Millisecond {
		t.Errorf("second Policy took %s", el)
	}
}

// TestPolicyFromDestinationServer: the real server's answers, over mTLS: a
// Service without routes gets its default route to itself (parent set, the
// backend being the parent: the original destination).
func TestPolicyFromDestinationServer(t *testing.T) {
	pe := newPolicyEnv(t, true, func(o *Options) { o.FirstTimeout = 5 * time.Second })
	pe.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID)))
	tb := pe.policy(svc)
	if tb == pe.r.defaultTable || tb.Parent.GetName() != "web" || len(tb.Routes) != 1 {
		t.Fatalf("Service without routes: %+v", tb)
	}
	rule, ok := tb.Match(&routes.Request{Method: "GET", Authority: "web", Target: "/x"})
	if !ok || rule.PickBackend(0).Authority != "" || rule.PickBackend(0).Ref.GetName() != "web" {
		t.Errorf("default route of a Service: %v %+v", ok, rule)
	}
	other := netip.MustParseAddrPort("10.96.0.20:8080")
	pe.srv.SetPolicy(other.String(), webPolicy("a", "b"))
	isTable(t, pe.policy(other), "a", "b")
}

// TestPolicyWithoutParentIsDefault: a destination destination answers with
// a policy without parent (not a Service) gets the default table at once;
// a later real policy replaces it, and a later parentless one puts the
// default back (the real one released, the default never).
func TestPolicyWithoutParentIsDefault(t *testing.T) {
	pe := newPolicyEnv(t, true, func(o *Options) { o.FirstTimeout = 5 * time.Second })
	t0 := time.Now()
	if tb := pe.policy(svc); tb != pe.r.defaultTable {
		t.Fatalf("no parent: got %v, want the default table", routeNames(tb))
	}
	if el := time.Since(t0); el > 2*time.Second {
		t.Errorf("no parent: Policy waited %s (FirstTimeout is 5s)", el)
	}

	pe2 := newPolicyEnv(t, false, func(o *Options) { o.FirstTimeout = 5 * time.Second })
	got := pe2.policyAsync(svc)
	st := pe2.stream(svc)
	st.msgs <- &destinationpb.OutboundPolicy{Source: "default"}
	if tb := <-got; tb != pe2.r.defaultTable {
		t.Fatalf("no parent: got %v", routeNames(tb))
	}
	st.msgs <- webPolicy("a")
	within(t, time.Second, "real policy replaces the default", func() bool { return pe2.policy(svc) != pe2.r.defaultTable })
	v1 := pe2.policy(svc)
	st.msgs <- &destinationpb.OutboundPolicy{Source: "default"}
	within(t, time.Second, "parentless policy puts the default back", func() bool { return pe2.policy(svc) == pe2.r.defaultTable })
	if pe2.tabs.released(v1) != 1 || pe2.tabs.released(pe2.r.defaultTable) != 0 || pe2.tabs.instrumented(pe2.r.defaultTable) != 1 {
		t.Errorf("released real %d, default %d times; default instrumented %d times; want 1, 0, 1",
			pe2.tabs.released(v1), pe2.tabs.released(pe2.r.defaultTable), pe2.tabs.instrumented(pe2.r.defaultTable))
	}
}

// TestPolicyFirstTimeoutFallsBack: a silent control plane costs the first
// request FirstTimeout, no more, and the default table; the real one is
// used once it arrives.
func TestPolicyFirstTimeoutFallsBack(t *testing.T) {
	const first = 200 * time.Millisecond
	pe := newPolicyEnv(t, false, func(o *Options) { o.FirstTimeout = first })
	t0 := time.Now()
	tb := pe.policy(svc)
	el := time.Since(t0)
	if tb != pe.r.defaultTable {
		t.Fatalf("silent control plane: got %v, want the default table", routeNames(tb))
	}
	if el < first*9/10 || el > first+500*time.Millisecond {
		t.Errorf("fallback after %s, want about %s", el, first)
	}
	st := pe.stream(svc)
	st.msgs <- webPolicy("late")
	within(t, time.Second, "the policy that arrived late is used", func() bool {
		return slices.Equal(routeNames(pe.policy(svc)), []string{"late"})
	})
	select {
	case <-pe.pc.opened:
		t.Error("a second policy stream was opened for the same destination")
	default:
	}
}

// TestPolicyUpdateReplacesTable: each update's table is instrumented
// before use and the one it replaces released, once each.
func TestPolicyUpdateReplacesTable(t *testing.T) {
	pe := newPolicyEnv(t, false, func(o *Options) { o.FirstTimeout = 5 * time.Second })
	st, t1 := pe.subscribe(webPolicy("v1"))
	isTable(t, t1, "v1")
	st.msgs <- webPolicy("v2", "extra")
	within(t, time.Second, "update applied", func() bool { return pe.policy(svc) != t1 })
	t2 := pe.policy(svc)
	isTable(t, t2, "v2", "extra")
	// Sleep: room for a double call; nothing marks that none comes.
	time.Sleep(50 * time.Millisecond)
	if i1, i2, r1, r2 := pe.tabs.instrumented(t1), pe.tabs.instrumented(t2), pe.tabs.released(t1), pe.tabs.released(t2); i1 != 1 || i2 != 1 || r1 != 1 || r2 != 0 {
		t.Errorf("instrumented v1 %d, v2 %d; released v1 %d, v2 %d; want 1, 1, 1, 0", i1, i2, r1, r2)
	}
}

// TestPolicyStreamErrorKeepsTable: while the stream is down the last table
// serves; the reconnected stream's snapshot replaces it.
func TestPolicyStreamErrorKeepsTable(t *testing.T) {
	pe := newPolicyEnv(t, false, func(o *Options) { o.FirstTimeout = 5 * time.Second })
	st, t1 := pe.subscribe(webPolicy("v1"))
	st.errs <- status.Error(codes.Unavailable, "control plane gone")
	st2 := pe.stream(svc) // reconnected (after backoff)
	select {
	case <-st.ctx.Done():
	default:
		t.Error("the failed stream's context was not cancelled")
	}
	t0 := time.Now()
	if tb := pe.policy(svc); tb != t1 {
		t.Fatalf("while reconnecting: %v, want the cached v1", routeNames(tb))
	}
	if el := time.Since(t0); el > 100*time.Millisecond {
		t.Errorf("Policy with a cached table took %s", el)
	}
	if pe.tabs.released(t1) != 0 {
		t.Error("cached table released when the stream failed")
	}
	if !pe.logs.has("outbound policy stream ended", "control plane gone") {
		t.Error("stream end not logged")
	}
	st2.msgs <- webPolicy("v2")
	within(t, time.Second, "reconnected snapshot replaces the cached table", func() bool {
		return slices.Equal(routeNames(pe.policy(svc)), []string{"v2"})
	})
	if pe.tabs.released(t1) != 1 {
		t.Errorf("v1 released %d times, want 1", pe.tabs.released(t1))
	}
}

// TestPolicyIdleDropped: a policy in use stays; unused for IdleTimeout it
// is dropped (stream cancelled, table released once) and a later Policy
// subscribes again.
func TestPolicyIdleDropped(t *testing.T) {
	pe := newPolicyEnv(t, false, func(o *Options) { o.IdleTimeout = 100 * time.Millisecond; o.FirstTimeout = 5 * time.Second })
	st, t1 := pe.subscribe(webPolicy("v1"))
	for range 15 { // 300 ms of use
		if pe.policy(svc) != t1 {
			t.Fatal("table changed while in use")
		}
		time.Sleep(20 * time.Millisecond) // Sleep: the pace of use, spread past the idle timeout on purpose
	}
	select {
	case <-st.ctx.Done():
		t.Fatal("policy dropped while in use")
	default:
	}
	select {
	case <-st.ctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("idle policy stream not cancelled")
	}
	within(t, time.Second, "idle policy forgotten", func() bool { return !pe.hasPolicySub(svc) })
	// Sleep: room for a second release (the stream's end, say); its absence has no event.
	time.Sleep(100 * time.Millisecond)
	if n := pe.tabs.released(t1); n != 1 {
		t.Errorf("dropped table released %d times, want 1", n)
	}
	_, t2 := pe.subscribe(webPolicy("v2")) // subscribes again
	isTable(t, t2, "v2")
}

// TestPolicyDroppedWhileCompiling: a message that arrives as its
// subscription is dropped leaves no table unreleased.
func TestPolicyDroppedWhileCompiling(t *testing.T) {
	entered, gate := make(chan struct{}), make(chan struct{})
	pe := newPolicyEnv(t, false, func(o *Options) { o.IdleTimeout = 100 * time.Millisecond; o.FirstTimeout = 5 * time.Second })
	pe.tabs.onInstrument = func(tb *routes.Table) {
		if slices.Equal(routeNames(tb), []string{"late"}) {
			close(entered)
			<-gate
		}
	}
	st, t1 := pe.subscribe(webPolicy("v1"))
	st.msgs <- webPolicy("late")
	<-entered
	select {
	case <-st.ctx.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("idle policy stream not cancelled")
	}
	within(t, time.Second, "idle policy forgotten", func() bool { return !pe.hasPolicySub(svc) })
	close(gate)
	var late *routes.Table
	within(t, time.Second, "late table instrumented", func() bool {
		pe.tabs.mu.Lock()
		defer pe.tabs.mu.Unlock()
		for tb := range pe.tabs.inst {
			if slices.Equal(routeNames(tb), []string{"late"}) {
				late = tb
			}
		}
		return late != nil
	})
	within(t, time.Second, "table compiled during the drop released", func() bool { return pe.tabs.released(late) == 1 })
	if pe.tabs.released(t1) != 1 {
		t.Errorf("v1 released %d times, want 1", pe.tabs.released(t1))
	}
}

// TestPolicyStartsEndpointSubscription: the first Policy for a destination
// opens its endpoint Get stream too, while still waiting for the policy;
// the Pick that follows reuses it.
func TestPolicyStartsEndpointSubscription(t *testing.T) {
	pe := newPolicyEnv(t, false, func(o *Options) { o.FirstTimeout = 5 * time.Second })
	pe.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID)))
	got := pe.policyAsync(svc)
	st := pe.stream(svc)
	select {
	case path := <-pe.srv.Opened:
		if path != svc.String() {
			t.Fatalf("Get stream for %q, want %q", path, svc)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Policy did not open the endpoint Get stream")
	}
	select {
	case <-got:
		t.Fatal("Policy returned before the policy arrived")
	default: // the Get stream opened while the policy was still awaited
	}
	st.msgs <- webPolicy("a")
	isTable(t, <-got, "a")
	p, err := pe.r.Pick(context.Background(), svc)
	if err != nil || p.Fallback || p.Addr.String() != "10.1.0.1:8080" {
		t.Fatalf("pick = %+v, %v", p, err)
	}
	p.Done()
	select {
	case path := <-pe.srv.Opened:
		t.Errorf("Pick opened another Get stream (%s)", path)
	case <-time.After(100 * time.Millisecond):
	}
}

// TestPolicyBadRegexRestWorks: a rule with a bad regex is left out and
// logged; the other rules and routes of the policy work.
func TestPolicyBadRegexRestWorks(t *testing.T) {
	pe := newPolicyEnv(t, true, func(o *Options) { o.FirstTimeout = 5 * time.Second })
	p := webPolicy("good")
	p.Routes = append(p.Routes, httpRoute("mixed", "~/bad(", "/fine"))
	pe.srv.SetPolicy(svc.String(), p)
	tb := pe.policy(svc)
	isTable(t, tb, "good", "mixed")
	if n := len(tb.Routes[1].Rules); n != 1 || tb.Routes[1].Rules[0].Index != 1 {
		t.Errorf("mixed route kept %d rules, want only rule 1", n)
	}
	for path, want := range map[string]string{"/good/x": "good", "/fine": "mixed", "/bad(": "", "/bad": ""} {
		if got := matchedRoute(tb, path); got != want {
			t.Errorf("%s matched route %q, want %q", path, got, want)
		}
	}
	if !pe.logs.has("cannot use", "mixed rule 0") {
		t.Errorf("dropped rule not logged: %v", pe.logs.lines())
	}
	if pe.tabs.instrumented(tb) != 1 {
		t.Error("table with a dropped rule not instrumented")
	}
}

// logRecorder is a slog.Handler keeping each record as "msg k=v …".
type logRecorder struct {
	mu   sync.Mutex
	recs []string
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	line := r.Message
	r.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.recs = append(h.recs, line)
	return nil
}

func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

func (h *logRecorder) lines() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.recs)
}

// has reports whether a record contains all of parts.
func (h *logRecorder) has(parts ...string) bool {
	for _, l := range h.lines() {
		if !slices.ContainsFunc(parts, func(p string) bool { return !strings.Contains(l, p) }) {
			return true
		}
	}
	return false
}
