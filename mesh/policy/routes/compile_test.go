package routes

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

func TestCompileDropsBadRules(t *testing.T) {
	empty := &pb.Filter{}
	cases := []struct {
		name    string
		rule    *pb.OutboundRule
		wantErr string
	}{
		{"bad path regex", rule(regex("/a/(")), "match 0: path regex"},
		{"bad header regex", rule(&pb.RouteMatch{Headers: []*pb.HeaderMatch{hdr(pb.HeaderMatch_REGEX, "x", "[")}}), "header X regex"},
		{"bad query regex", rule(&pb.RouteMatch{Query: []*pb.QueryMatch{qry(pb.QueryMatch_REGEX, "q", "(")}}), "query parameter q regex"},
		{"header without name", rule(&pb.RouteMatch{Headers: []*pb.HeaderMatch{hdr(pb.HeaderMatch_EXACT, "", "v")}}), "header match without a name"},
		{"prefix without slash", rule(prefix("foo")), "does not start with /"},
		{"unknown path kind", rule(pathMatch(7, "/")), "path match kind"},
		{"condition with nothing set", rule(cond(condAllOf(&pb.Condition{}))), "condition: nothing set"},
		{"bad condition regex", rule(cond(condNotOf(condPathOf("(")))), "path_regex"},
		{"filter with nothing set", &pb.OutboundRule{Filters: []*pb.Filter{empty}}, "filter 0: nothing set"},
		{"header modifier with nothing set", &pb.OutboundRule{Filters: []*pb.Filter{{Kind: &pb.Filter_RequestHeaderModifier{}}}}, "nothing set"},
		{"bad header name", &pb.OutboundRule{Filters: []*pb.Filter{reqHeaders(headerModifier(map[string]string{"a b": "1"}, nil))}}, "invalid header"},
		{"bad header value", &pb.OutboundRule{Filters: []*pb.Filter{respHeaders(headerModifier(nil, map[string]string{"a": "1\r\n"}))}}, "invalid header"},
		{"url rewrite with nothing set", &pb.OutboundRule{Filters: []*pb.Filter{rewrite("", nil)}}, "url_rewrite with nothing set"},
		{"path modifier with nothing set", &pb.OutboundRule{Filters: []*pb.Filter{rewrite("", &pb.PathModifier{})}}, "path with nothing set"},
		{"prefix rewrite with an exact match", &pb.OutboundRule{Matches: []*pb.RouteMatch{prefix("/a"), exact("/b")}, Filters: []*pb.Filter{rewrite("", prefixPath("/x"))}}, "match 1: a prefix replacement needs a PathPrefix match"},
		{"prefix redirect with a regex match", &pb.OutboundRule{Matches: []*pb.RouteMatch{regex("/b")}, Filters: []*pb.Filter{redirectTo(&pb.RequestRedirect{Path: prefixPath("/x")})}}, "needs a PathPrefix match"},
		{"redirect scheme", &pb.OutboundRule{Filters: []*pb.Filter{redirectTo(&pb.RequestRedirect{Scheme: "ftp"})}}, `scheme "ftp"`},
		{"redirect status", &pb.OutboundRule{Filters: []*pb.Filter{redirectTo(&pb.RequestRedirect{Status: 200})}}, "status 200"},
		{"two redirects", &pb.OutboundRule{Filters: []*pb.Filter{redirectTo(&pb.RequestRedirect{}), redirectTo(&pb.RequestRedirect{})}}, "a second request_redirect"},
		{"redirect as a backend filter", &pb.OutboundRule{Backends: []*pb.Backend{{Filters: []*pb.Filter{redirectTo(&pb.RequestRedirect{})}}}}, "backend 0: filter 0: request_redirect is not a backend filter"},
		{"empty backend filter", &pb.OutboundRule{Backends: []*pb.Backend{{Filters: []*pb.Filter{empty}}}}, "backend 0: filter 0: nothing set"},
		{"negative timeout", &pb.OutboundRule{Timeouts: &pb.Timeouts{Request: newDuration(-1)}}, "timeout request"},
		{"empty status range", &pb.OutboundRule{Retry: &pb.RetryPolicy{HttpStatuses: []*pb.StatusRange{{Min: 504, Max: 500}}}}, "retry: status range 504-500 is empty"},
		{"response class with nothing set", &pb.OutboundRule{ResponseClasses: []*pb.ResponseClass{{Condition: respAll(&pb.ResponseMatch{})}}}, "response class 0: response condition with nothing set"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			good := rule(prefix("/"))
			tb, err := Compile(policy(route("r", nil, good, c.rule)))
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Fatalf("err = %v, want one with %q", err, c.wantErr)
			}
			if !strings.HasPrefix(err.Error(), "route HTTPRoute ns/r rule 1: ") {
				t.Errorf("err %q does not name the route and rule", err)
			}
			var re *RuleError
			if !errors.As(err, &re) || re.Rule != 1 || re.Route.Name != "r" {
				t.Errorf("err = %#v, want a *RuleError for rule 1", err)
			}
			if n := len(tb.Routes[0].Rules); n != 1 || tb.Routes[0].Rules[0].Index != 0 {
				t.Fatalf("rules kept: %d, want rule 0 only", n)
			}
			if got := ruleName(tb.Match(get("/a"))); got != "r/0" {
				t.Errorf("Match = %q, want r/0", got)
			}
		})
	}
}

func TestCompileJoinsErrors(t *testing.T) {
	p := policy(
		route("a", nil, rule(regex("(")), rule(exact("/ok"))),
		route("b", []string{"*"}, rule()),
		route("c", nil, rule(regex("[")), rule(regex(")"))),
	)
	tb, err := Compile(p)
	var errs []*RuleError
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		errs = append(errs, e.(*RuleError))
	}
	got := []string{}
	for _, e := range errs {
		got = append(got, fmt.Sprintf("%s/%d", e.Route.Name, e.Rule))
	}
	// Rule -1: the whole route.
	if want := "a/0 b/-1 c/0 c/1"; strings.Join(got, " ") != want {
		t.Errorf("errors for %v, want %s:\n%v", got, want, err)
	}
	if !strings.Contains(err.Error(), `route HTTPRoute ns/b: hostname "*"`) {
		t.Errorf("route error: %v", err)
	}
	if len(tb.Routes) != 2 || len(tb.Routes[1].Rules) != 0 {
		t.Errorf("routes kept: %d", len(tb.Routes))
	}
	if got := ruleName(tb.Match(get("/ok"))); got != "a/1" {
		t.Errorf("Match = %q", got)
	}
}

func TestCompileHostnames(t *testing.T) {
	for _, bad := range []string{"", "*", "*.", "a.*.com", "*a.com", "**.a"} {
		if _, err := Compile(policy(route("r", []string{"ok.ns", bad}, rule()))); err == nil {
			t.Errorf("hostname %q compiled", bad)
		}
	}
	hs, err := compileHostnames([]string{"A.ns.", "a.ns", "*.B.com"})
	if err != nil || len(hs) != 2 || hs[0] != (hostname{"a.ns", false}) || hs[1] != (hostname{".b.com", true}) {
		t.Errorf("compileHostnames = %v, %v", hs, err)
	}
}

func TestCompileNil(t *testing.T) {
	tb, err := Compile(nil)
	if err != nil || len(tb.Routes) != 1 || tb.Routes[0].Ref.Kind != "default" {
		t.Fatalf("Compile(nil) = %v, %v; want Default()", tb, err)
	}
	tb = mustCompile(t, &pb.OutboundPolicy{Source: "httproute"})
	if _, ok := tb.Match(get("/")); ok {
		t.Error("a policy without routes matches")
	}
	tb = mustCompile(t, policy(&pb.OutboundRoute{Rules: []*pb.OutboundRule{{Backends: []*pb.Backend{{Weight: 1}}}}}))
	r, ok := tb.Match(get("/"))
	if !ok || r.Route.Ref == nil || r.Backends[0].Ref == nil {
		t.Error("nil refs are not replaced")
	}
}

func TestDefault(t *testing.T) {
	tb := Default()
	for _, r := range []*Request{get("/"), get("/a/b?c"), {}, {Target: "*", GRPC: true}} {
		rule, ok := tb.Match(r)
		if !ok {
			t.Fatalf("Default does not match %+v", r)
		}
		if r.MatchedPrefix != "/" {
			t.Errorf("MatchedPrefix = %q", r.MatchedPrefix)
		}
		if rule.Route.Ref.Kind != "default" || rule.Route.Ref.Name != "http" || rule.Index != 0 {
			t.Errorf("route %v rule %d", rule.Route.Ref, rule.Index)
		}
		if !rule.Plain || rule.Retry != nil || rule.Timeouts != (Timeouts{}) {
			t.Errorf("rule %+v", rule)
		}
		b := rule.PickBackend(12345)
		if b == nil || b.Authority != "" || b.Failure != "" {
			t.Errorf("backend %+v", b)
		}
	}
}

func pickRule(t testing.TB, weights ...uint32) *Rule {
	t.Helper()
	r := &pb.OutboundRule{}
	for i, w := range weights {
		r.Backends = append(r.Backends, backend(string(rune('a'+i)), w))
	}
	return mustCompile(t, policy(route("r", nil, r))).Routes[0].Rules[0]
}

// PickBackendWhere picks by weight among the backends ok accepts, and
// nil when it accepts none.
func TestPickBackendWhere(t *testing.T) {
	r := pickRule(t, 1, 1, 2)
	notA := func(b *Backend) bool { return b.Ref.Name != "a" }
	c := map[string]int{}
	const n = 1200
	for i := range uint64(n) {
		c[r.PickBackendWhere(i*(math.MaxUint64/n), notA).Ref.Name]++
	}
	if c["a"] != 0 || c["b"] < 399 || c["b"] > 401 || c["c"] < 799 || c["c"] > 801 {
		t.Errorf("picks %v, want b 400 and c 800", c)
	}
	if b := r.PickBackendWhere(7, func(*Backend) bool { return false }); b != nil {
		t.Errorf("none accepted: picked %s", b.Ref.Name)
	}
}

func TestPickBackend(t *testing.T) {
	// rnd sweeps [0, 2^64) evenly: the picks must be in proportion.
	counts := func(r *Rule) map[string]int {
		c := map[string]int{}
		const n = 1000
		for i := range uint64(n) {
			if b := r.PickBackend(i * (math.MaxUint64 / n)); b != nil {
				c[b.Ref.Name]++
			} else {
				c["nil"]++
			}
		}
		return c
	}
	cases := []struct {
		weights []uint32
		want    map[string]int
	}{
		{[]uint32{1}, map[string]int{"a": 1000}},
		{[]uint32{1, 1}, map[string]int{"a": 500, "b": 500}},
		{[]uint32{1, 3}, map[string]int{"a": 250, "b": 750}},
		{[]uint32{0, 1, 0, 4}, map[string]int{"b": 200, "d": 800}},
		{[]uint32{0}, map[string]int{"nil": 1000}},
		{[]uint32{0, 0}, map[string]int{"nil": 1000}},
		{nil, map[string]int{"nil": 1000}},
		{[]uint32{math.MaxUint32, math.MaxUint32}, map[string]int{"a": 500, "b": 500}},
	}
	for _, c := range cases {
		got := counts(pickRule(t, c.weights...))
		if len(got) != len(c.want) {
			t.Errorf("weights %v: picks %v, want %v", c.weights, got, c.want)
			continue
		}
		for k, v := range c.want {
			if d := got[k] - v; d < -1 || d > 1 {
				t.Errorf("weights %v: picks %v, want %v", c.weights, got, c.want)
			}
		}
	}
	r := pickRule(t, 0, 5)
	for _, rnd := range []uint64{0, 1, math.MaxUint64} {
		if b := r.PickBackend(rnd); b == nil || b.Ref.Name != "b" {
			t.Errorf("PickBackend(%d) = %v", rnd, b)
		}
	}
}

func TestBudgetsShared(t *testing.T) {
	retry := func(b *pb.RetryBudget) *pb.OutboundRule {
		r := rule()
		r.Retry = &pb.RetryPolicy{Limit: 1, Budget: b}
		return r
	}
	other := &pb.RetryBudget{Ratio: 0.5, MinPerSecond: 1, Ttl: newDuration(5)}
	p := policy(
		route("a", nil, retry(nil), retry(nil), retry(other)),
		route("b", nil, retry(nil)),
	)
	tb := mustCompile(t, p)
	a, b := tb.Routes[0].Rules, tb.Routes[1].Rules
	if a[0].Retry.Budget != a[1].Retry.Budget || a[0].Retry.Budget == a[2].Retry.Budget || a[0].Retry.Budget == b[0].Retry.Budget {
		t.Error("budgets: want one per route and parameters")
	}
	p.Source = "serviceprofile"
	tb = mustCompile(t, p)
	a, b = tb.Routes[0].Rules, tb.Routes[1].Rules
	if a[0].Retry.Budget != b[0].Retry.Budget || a[0].Retry.Budget == a[2].Retry.Budget {
		t.Error("profile budgets: want one per table and parameters")
	}
}

func TestTimeouts(t *testing.T) {
	r := rule()
	r.Timeouts = &pb.Timeouts{Request: newDuration(10), Response: newDuration(2), Idle: newDuration(0)}
	got := mustCompile(t, policy(route("r", nil, r))).Routes[0].Rules[0].Timeouts
	if got.Request.Seconds() != 10 || got.Response.Seconds() != 2 || got.Idle != 0 {
		t.Errorf("Timeouts = %+v", got)
	}
}

// TestCompileZoneAware: the parent's ZoneAware reaches every backend of
// every rule; without it no backend has a zone.
func TestCompileZoneAware(t *testing.T) {
	two := &pb.OutboundRule{Backends: []*pb.Backend{{Weight: 1}, {Weight: 1}}}
	p := policy(route("r", nil, rule(prefix("/")), two))
	p.ZoneAware = &pb.ZoneAware{LocalZone: "zone-a"}
	for _, zoned := range []bool{true, false} {
		if !zoned {
			p.ZoneAware = nil
		}
		tb, err := Compile(p)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		tb.eachBackend(func(b *Backend) {
			n++
			if want := map[bool]string{true: "zone-a"}[zoned]; b.LocalZone != want {
				t.Errorf("zone-aware %v: backend %v has local zone %q, want %q", zoned, b.Ref, b.LocalZone, want)
			}
		})
		if n < 3 {
			t.Fatalf("%d backends seen, want at least 3", n)
		}
	}
}
