package routes

import (
	"testing"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

func TestPrecedence(t *testing.T) {
	withMethod := &pb.RouteMatch{Path: prefix("/").Path, Method: "GET"}
	h := func(n int) *pb.RouteMatch {
		m := &pb.RouteMatch{}
		for i := range n {
			m.Headers = append(m.Headers, hdr(pb.HeaderMatch_REGEX, "x-"+string(rune('a'+i)), ".*"))
		}
		return m
	}
	q := func(n int) *pb.RouteMatch {
		m := &pb.RouteMatch{}
		for i := range n {
			m.Query = append(m.Query, qry(pb.QueryMatch_REGEX, string(rune('a'+i)), ".*"))
		}
		return m
	}
	r := func(name string, ms ...*pb.RouteMatch) *pb.OutboundRoute { return route(name, nil, rule(ms...)) }
	hr := func(name string, hosts ...string) *pb.OutboundRoute { return route(name, hosts, rule()) }
	runMatchCases(t, []matchCase{
		{"exact over regex and prefix", policy(r("p", prefix("/foo")), r("re", regex("/fo+")), r("ex", exact("/foo"))), get("/foo"), "ex/0"},
		{"regex over prefix", policy(r("p", prefix("/foo")), r("re", regex("/fo+"))), get("/foo"), "re/0"},
		{"longer prefix", policy(r("short", prefix("/a")), r("long", prefix("/a/b"))), get("/a/b/c"), "long/0"},
		{"trailing slash not longer", policy(r("slash", prefix("/a/")), r("bare", prefix("/a"))), get("/a/b"), "slash/0"},
		{"prefix over no match", policy(r("all"), r("p", prefix("/a"))), get("/a"), "p/0"},
		{"method", policy(r("none", prefix("/")), r("m", withMethod)), get("/"), "m/0"},
		{"more headers", policy(r("one", h(1)), r("two", h(2))), withHeaders(get("/"), "x-a", "1", "x-b", "2"), "two/0"},
		{"more query", policy(r("one", q(1)), r("two", q(2))), get("/?a=1&b=2"), "two/0"},
		{"method over headers", policy(r("h", h(3)), r("m", withMethod)), get("/"), "m/0"},
		{"headers over query", policy(r("q", q(3)), r("h", h(1))), get("/?a&b&c"), "h/0"},
		{"path over method", policy(r("m", withMethod), r("long", prefix("/a"))), get("/a"), "long/0"},
		{"tie: route order", policy(r("first", prefix("/a")), r("second", prefix("/a"))), get("/a"), "first/0"},
		{"tie: rule order", policy(route("r", nil, rule(prefix("/b")), rule(prefix("/a")), rule(prefix("/a")))), get("/a"), "r/1"},
		{"ranked across rules of one route", policy(route("r", nil, rule(prefix("/")), rule(exact("/a")))), get("/a"), "r/1"},
		{"best match of a rule counts", policy(r("a", prefix("/x")), route("b", nil, rule(prefix("/"), exact("/x")))), get("/x"), "b/0"},
		{"hostname over path", policy(route("none", nil, rule(exact("/a"))), hr("host", "web.ns")), get("/a"), "host/0"},
		{"exact host over wildcard", policy(hr("wild", "*.ns"), hr("exact", "web.ns")), get("/"), "exact/0"},
		{"longer wildcard", policy(hr("short", "*.com"), hr("long", "*.example.com")), at("a.b.example.com", "/"), "long/0"},
		{"wildcard over none", policy(hr("none"), hr("wild", "*.com")), at("a.com", "/"), "wild/0"},
		{"falls to a less specific host", policy(route("exact", []string{"web.ns"}, rule(exact("/x"))), hr("wild", "*.ns")), get("/a"), "wild/0"},
		{"falls to no hostname", policy(route("exact", []string{"web.ns"}, rule(exact("/x"))), hr("none")), get("/a"), "none/0"},
		{"other host skips hosted", policy(hr("exact", "api.ns"), hr("none")), get("/a"), "none/0"},
		{"tie among hosts: route order", policy(hr("first", "web.ns"), hr("second", "web.ns", "x")), get("/"), "first/0"},
		{"profile: listed order", profile(r("all", prefix("/")), r("ex", exact("/a"))), get("/a"), "all/0"},
		{"profile: first that matches", profile(r("ex", exact("/b")), r("p", prefix("/a")), r("all")), get("/a"), "p/0"},
		{"profile: rule order", profile(route("r", nil, rule(cond(condMethodOf("POST"))), rule(cond(condMethodOf("GET"))), rule())), get("/"), "r/1"},
		{"profile: hostnames still hold", profile(hr("other", "api.ns"), hr("web", "web.ns")), get("/"), "web/0"},
		{"profile: no match", profile(r("ex", exact("/b"))), get("/a"), ""},
	})
}
