package routes

import (
	"net/http"
	"testing"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

type matchCase struct {
	name string
	p    *pb.OutboundPolicy
	r    *Request
	want string // "route/rule", "" for no match
}

func runMatchCases(t *testing.T, cases []matchCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := mustCompile(t, c.p)
			if got := ruleName(tb.Match(c.r)); got != c.want {
				t.Errorf("Match(%s %s %s) = %q, want %q", c.r.Method, c.r.Authority, c.r.Target, got, c.want)
			}
		})
	}
}

// one is a policy of a single route with a single rule of the given matches.
func one(ms ...*pb.RouteMatch) *pb.OutboundPolicy {
	return policy(route("r", nil, rule(ms...)))
}

func TestMatchPath(t *testing.T) {
	runMatchCases(t, []matchCase{
		{"exact", one(exact("/foo")), get("/foo"), "r/0"},
		{"exact ignores the query", one(exact("/foo")), get("/foo?x=1"), "r/0"},
		{"exact not a longer path", one(exact("/foo")), get("/foo/"), ""},
		{"exact not a prefix", one(exact("/foo")), get("/fo"), ""},
		{"exact is case-sensitive", one(exact("/foo")), get("/FOO"), ""},
		{"prefix itself", one(prefix("/foo")), get("/foo"), "r/0"},
		{"prefix with slash", one(prefix("/foo")), get("/foo/"), "r/0"},
		{"prefix subpath", one(prefix("/foo")), get("/foo/bar"), "r/0"},
		{"prefix query", one(prefix("/foo")), get("/foo?bar"), "r/0"},
		{"prefix segment boundary", one(prefix("/foo")), get("/foobar"), ""},
		{"prefix shorter path", one(prefix("/foo")), get("/fo"), ""},
		{"prefix trailing slash ignored: itself", one(prefix("/foo/")), get("/foo"), "r/0"},
		{"prefix trailing slash ignored: subpath", one(prefix("/foo/")), get("/foo/bar"), "r/0"},
		{"prefix trailing slash ignored: boundary", one(prefix("/foo/")), get("/foobar"), ""},
		{"prefix / matches all", one(prefix("/")), get("/anything/at/all"), "r/0"},
		{"no matches match all", one(), get("/x?y"), "r/0"},
		{"absolute-form target", one(prefix("/foo")), get("http://web.ns/foo/bar?x"), "r/0"},
		{"absolute-form without path", one(exact("/")), get("http://web.ns"), "r/0"},
		{"empty target is /", one(exact("/")), get(""), "r/0"},
		{"regex", one(regex("/api/v1/users/[0-9]+")), get("/api/v1/users/42"), "r/0"},
		{"regex query", one(regex("/api/v1/users/[0-9]+")), get("/api/v1/users/42?a=b"), "r/0"},
		{"regex anchored start", one(regex("/api/v1/users/[0-9]+")), get("/x/api/v1/users/42"), ""},
		{"regex anchored end", one(regex("/api/v1/users/[0-9]+")), get("/api/v1/users/42/x"), ""},
		{"regex alternation anchored", one(regex("/a|/b")), get("/ab"), ""},
		{"regex alternation", one(regex("/a|/b")), get("/b"), "r/0"},
		{"regex literal", one(regex("/lit")), get("/lit"), "r/0"},
		{"regex literal longer", one(regex("/lit")), get("/lit/"), ""},
		{"regex own anchors", one(regex("^/x/.*$")), get("/x/y"), "r/0"},
		{"regex suffix prefilter", one(regex("/o/[a-z]+/items")), get("/o/abc/items"), "r/0"},
		{"regex suffix prefilter refuses", one(regex("/o/[a-z]+/items")), get("/o/abc/item"), ""},
		{"regex case folding", one(regex("(?i)/ABC/[0-9]+")), get("/abc/1"), "r/0"},
		{"regex case folding suffix", one(regex("/[0-9]+(?i)X")), get("/1x"), "r/0"},
		{"regex capture suffix", one(regex("/u/([0-9]+)/v")), get("/u/7/v"), "r/0"},
	})
}

func withHeaders(r *Request, kv ...string) *Request {
	h := http.Header{}
	for i := 0; i < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	r.Header = h
	return r
}

func hdr(kind pb.HeaderMatch_Kind, name, value string) *pb.HeaderMatch {
	return &pb.HeaderMatch{Kind: kind, Name: name, Value: value}
}

func qry(kind pb.QueryMatch_Kind, name, value string) *pb.QueryMatch {
	return &pb.QueryMatch{Kind: kind, Name: name, Value: value}
}

func TestMatchHeaders(t *testing.T) {
	hx := func(hs ...*pb.HeaderMatch) *pb.OutboundPolicy { return one(&pb.RouteMatch{Headers: hs}) }
	ex := func(n, v string) *pb.HeaderMatch { return hdr(pb.HeaderMatch_EXACT, n, v) }
	re := func(n, v string) *pb.HeaderMatch { return hdr(pb.HeaderMatch_REGEX, n, v) }
	runMatchCases(t, []matchCase{
		{"exact", hx(ex("x-user", "alice")), withHeaders(get("/"), "X-User", "alice"), "r/0"},
		{"name case-insensitive", hx(ex("X-USER", "alice")), withHeaders(get("/"), "x-user", "alice"), "r/0"},
		{"value case-sensitive", hx(ex("x-user", "alice")), withHeaders(get("/"), "X-User", "Alice"), ""},
		{"first value", hx(ex("x-user", "bob")), withHeaders(get("/"), "X-User", "alice", "X-User", "bob"), ""},
		{"absent", hx(ex("x-user", "alice")), get("/"), ""},
		{"nil Header", hx(ex("x-user", "alice")), &Request{Target: "/"}, ""},
		{"all required", hx(ex("a", "1"), ex("b", "2")), withHeaders(get("/"), "A", "1"), ""},
		{"all present", hx(ex("a", "1"), ex("b", "2")), withHeaders(get("/"), "A", "1", "B", "2"), "r/0"},
		{"regex", hx(re("x-v", "v[0-9]+")), withHeaders(get("/"), "X-V", "v12"), "r/0"},
		{"regex anchored", hx(re("x-v", "v[0-9]+")), withHeaders(get("/"), "X-V", "av12"), ""},
		{"regex anchored end", hx(re("x-v", "v[0-9]+")), withHeaders(get("/"), "X-V", "v12a"), ""},
	})
}

func TestMatchQuery(t *testing.T) {
	qx := func(qs ...*pb.QueryMatch) *pb.OutboundPolicy { return one(&pb.RouteMatch{Query: qs}) }
	ex := func(n, v string) *pb.QueryMatch { return qry(pb.QueryMatch_EXACT, n, v) }
	re := func(n, v string) *pb.QueryMatch { return qry(pb.QueryMatch_REGEX, n, v) }
	runMatchCases(t, []matchCase{
		{"exact", qx(ex("v", "1")), get("/p?v=1"), "r/0"},
		{"exact among others", qx(ex("v", "1")), get("/p?a=b&v=1&c"), "r/0"},
		{"first value", qx(ex("v", "2")), get("/p?v=1&v=2"), ""},
		{"absent", qx(ex("v", "1")), get("/p?w=1"), ""},
		{"no query", qx(ex("v", "")), get("/p"), ""},
		{"empty value", qx(ex("v", "")), get("/p?v"), "r/0"},
		{"name case-sensitive", qx(ex("v", "1")), get("/p?V=1"), ""},
		{"escaped name and value", qx(ex("na me", "café")), get("/p?na+me=caf%C3%A9"), "r/0"},
		{"escaped name %", qx(ex("v", "1")), get("/p?%76=1"), "r/0"},
		{"bad escape is literal", qx(ex("v", "%zz")), get("/p?v=%zz"), "r/0"},
		{"truncated escape", qx(ex("v", "%4")), get("/p?v=%4"), "r/0"},
		{"all required", qx(ex("a", "1"), ex("b", "2")), get("/p?a=1"), ""},
		{"all present", qx(ex("a", "1"), ex("b", "2")), get("/p?b=2&a=1"), "r/0"},
		{"regex", qx(re("id", "[0-9]+")), get("/p?id=42"), "r/0"},
		{"regex anchored", qx(re("id", "[0-9]+")), get("/p?id=42x"), ""},
		{"regex on decoded value", qx(re("q", "a b/c")), get("/p?q=a+b%2Fc"), "r/0"},
		{"regex absent", qx(re("q", ".*")), get("/p"), ""},
	})
}

func TestMatchMethod(t *testing.T) {
	m := one(&pb.RouteMatch{Method: "POST"})
	post := get("/")
	post.Method = "POST"
	runMatchCases(t, []matchCase{
		{"same", m, post, "r/0"},
		{"other", m, get("/"), ""},
	})
}

func at(authority, target string) *Request {
	r := get(target)
	r.Authority = authority
	return r
}

func TestMatchHostnames(t *testing.T) {
	hosts := func(hs ...string) *pb.OutboundPolicy { return policy(route("r", hs, rule())) }
	runMatchCases(t, []matchCase{
		{"none matches any", hosts(), at("whatever:1", "/"), "r/0"},
		{"exact", hosts("web.ns"), at("web.ns", "/"), "r/0"},
		{"exact port and case", hosts("web.ns"), at("WEB.Ns:8080", "/"), "r/0"},
		{"exact trailing dot", hosts("web.ns"), at("web.ns.:80", "/"), "r/0"},
		{"exact other", hosts("web.ns"), at("api.ns", "/"), ""},
		{"exact not a suffix", hosts("web.ns"), at("a.web.ns", "/"), ""},
		{"one of several", hosts("a.ns", "web.ns"), at("web.ns", "/"), "r/0"},
		{"wildcard", hosts("*.example.com"), at("a.example.com", "/"), "r/0"},
		{"wildcard deeper", hosts("*.example.com"), at("a.b.example.com:80", "/"), "r/0"},
		{"wildcard not the bare suffix", hosts("*.example.com"), at("example.com", "/"), ""},
		{"wildcard label boundary", hosts("*.example.com"), at("aexample.com", "/"), ""},
		{"wildcard case", hosts("*.Example.com"), at("A.EXAMPLE.COM", "/"), "r/0"},
		{"empty authority", hosts("web.ns"), at("", "/"), ""},
		{"ipv6 authority", hosts("web.ns"), at("[::1]:80", "/"), ""},
		{"too long", hosts("web.ns"), at(string(make([]byte, 300)), "/"), ""},
	})
}

func TestMatchGRPC(t *testing.T) {
	g := route("g", nil, rule())
	g.Protocol = pb.OutboundRoute_GRPC
	defaultGRPC := route("grpc", nil, rule())
	defaultGRPC.Protocol = pb.OutboundRoute_GRPC
	defaultGRPC.Ref.Kind = "default"
	byMethod := route("method", nil, rule(regex("/[^/]+/Method")))
	byMethod.Protocol = pb.OutboundRoute_GRPC
	byService := route("svc", nil, rule(prefix("/pkg.Svc/")))
	byService.Protocol = pb.OutboundRoute_GRPC
	grpcReq := get("/pkg.Svc/Method")
	grpcReq.GRPC = true
	runMatchCases(t, []matchCase{
		{"grpc route, grpc request", policy(g), grpcReq, "g/0"},
		{"grpc route, http request", policy(g), get("/pkg.Svc/Method"), ""},
		{"http route, grpc request", policy(route("h", nil, rule())), grpcReq, "h/0"},
		{"default route of a grpc port, http request", policy(defaultGRPC), get("/healthz"), "grpc/0"},
		{"grpc: a matching service ranks above a matching method", policy(byMethod, byService), grpcReq, "svc/0"},
	})
}

func TestMatchConditions(t *testing.T) {
	pr := func(c *pb.Condition) *pb.OutboundPolicy { return profile(route("r", nil, rule(cond(c)))) }
	post := get("/books/12")
	post.Method = "POST"
	runMatchCases(t, []matchCase{
		{"method", pr(condMethodOf("GET")), get("/"), "r/0"},
		{"method other", pr(condMethodOf("GET")), post, ""},
		{"path_regex", pr(condPathOf("/books/[0-9]+")), get("/books/12?x"), "r/0"},
		{"path_regex anchored", pr(condPathOf("/books/[0-9]+")), get("/books/12/x"), ""},
		{"path_regex anchored start", pr(condPathOf("/books/[0-9]+")), get("/a/books/12"), ""},
		{"all", pr(condAllOf(condMethodOf("POST"), condPathOf("/books/.*"))), post, "r/0"},
		{"all one fails", pr(condAllOf(condMethodOf("GET"), condPathOf("/books/.*"))), post, ""},
		{"all empty", pr(condAllOf()), get("/"), "r/0"},
		{"any", pr(condAnyOf(condMethodOf("GET"), condMethodOf("POST"))), post, "r/0"},
		{"any none", pr(condAnyOf(condMethodOf("GET"), condMethodOf("PUT"))), post, ""},
		{"any empty", pr(condAnyOf()), get("/"), ""},
		{"not", pr(condNotOf(condMethodOf("GET"))), post, "r/0"},
		{"not fails", pr(condNotOf(condMethodOf("POST"))), post, ""},
		{"nested", pr(condAllOf(condNotOf(condMethodOf("GET")), condAnyOf(condPathOf("/x"), condPathOf("/books/[0-9]+")))), post, "r/0"},
	})
}

func TestMatchedPrefix(t *testing.T) {
	cases := []struct {
		name string
		m    []*pb.RouteMatch
		r    *Request
		want string
	}{
		{"prefix as written", []*pb.RouteMatch{prefix("/foo/")}, get("/foo/bar"), "/foo/"},
		{"the match that held", []*pb.RouteMatch{prefix("/a"), prefix("/b")}, get("/b/c"), "/b"},
		{"no matches", nil, get("/x"), "/"},
		{"no path", []*pb.RouteMatch{{Method: "GET"}}, get("/x"), "/"},
		{"exact", []*pb.RouteMatch{exact("/x")}, get("/x"), ""},
		{"regex", []*pb.RouteMatch{regex("/x")}, get("/x"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.r.MatchedPrefix = "stale"
			if _, ok := mustCompile(t, one(c.m...)).Match(c.r); !ok {
				t.Fatal("no match")
			}
			if c.r.MatchedPrefix != c.want {
				t.Errorf("MatchedPrefix = %q, want %q", c.r.MatchedPrefix, c.want)
			}
		})
	}
	r := get("/nothing")
	r.MatchedPrefix = "stale"
	if _, ok := mustCompile(t, one(exact("/x"))).Match(r); ok || r.MatchedPrefix != "" {
		t.Errorf("no match: ok %v, MatchedPrefix %q", ok, r.MatchedPrefix)
	}
}

func TestMatchDoesNotAllocate(t *testing.T) {
	p := policy(
		route("hosted", []string{"*.example.com", "web.ns"}, rule(&pb.RouteMatch{
			Path:    prefix("/api").Path,
			Headers: []*pb.HeaderMatch{hdr(pb.HeaderMatch_REGEX, "x-user", "[a-z]+"), hdr(pb.HeaderMatch_EXACT, "x-mode", "on")},
			Query:   []*pb.QueryMatch{qry(pb.QueryMatch_REGEX, "q", "a b.*"), qry(pb.QueryMatch_EXACT, "v", "é")},
		})),
		route("other", nil, rule(regex("/other/[0-9]+"))),
	)
	tb := mustCompile(t, p)
	r := withHeaders(at("Web.NS:80", "/api/x?q=a+b%2F&v=%C3%A9"), "x-user", "alice", "x-mode", "on")
	if got := ruleName(tb.Match(r)); got != "hosted/0" {
		t.Fatalf("Match = %q", got)
	}
	if n := testing.AllocsPerRun(100, func() { tb.Match(r) }); n != 0 {
		t.Errorf("Match allocates %v times", n)
	}
	pr := mustCompile(t, profile(route("p", []string{"web.ns"}, rule(cond(condPathOf("/api/.*"))))))
	if n := testing.AllocsPerRun(100, func() { pr.Match(r) }); n != 0 {
		t.Errorf("profile Match allocates %v times", n)
	}
}
