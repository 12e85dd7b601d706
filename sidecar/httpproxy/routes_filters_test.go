package httpproxy

import (
	"bufio"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"strconv"
	"testing"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

func rtHeaders(kv ...string) []*pb.Header {
	var hs []*pb.Header
	for i := 0; i+1 < len(kv); i += 2 {
		hs = append(hs, &pb.Header{Name: kv[i], Value: kv[i+1]})
	}
	return hs
}

func rtRequestHeaders(m *pb.HeaderModifier) *pb.Filter {
	return &pb.Filter{Kind: &pb.Filter_RequestHeaderModifier{RequestHeaderModifier: m}}
}

func rtResponseHeaders(m *pb.HeaderModifier) *pb.Filter {
	return &pb.Filter{Kind: &pb.Filter_ResponseHeaderModifier{ResponseHeaderModifier: m}}
}

// Each filter's effect, observed at the upstream or the client, on every
// engine (the fast path hands filtered rules to net/http).
func TestRouteFilters(t *testing.T) {
	up := rtServe(t, "b", func(w http.ResponseWriter, r *http.Request, _ int) bool {
		w.Header().Set("X-Secret", "upstream-internal")
		w.Header().Set("X-Resp", "upstream")
		return false
	})
	headers := rtRule("b", rtPath(pb.PathMatch_PREFIX, "/headers"))
	headers.Filters = []*pb.Filter{
		rtRequestHeaders(&pb.HeaderModifier{Set: rtHeaders("X-Set", "set"), Add: rtHeaders("X-Add", "two"), Remove: []string{"x-remove"}}),
		rtResponseHeaders(&pb.HeaderModifier{Set: rtHeaders("X-Resp", "proxy"), Add: rtHeaders("X-Added", "yes"), Remove: []string{"X-Secret"}}),
	}
	rewrite := rtRule("b", rtPath(pb.PathMatch_PREFIX, "/v1"))
	rewrite.Filters = []*pb.Filter{{Kind: &pb.Filter_UrlRewrite{UrlRewrite: &pb.URLRewrite{
		Hostname: "internal.example", Path: &pb.PathModifier{Kind: &pb.PathModifier_Prefix{Prefix: "/v2"}}}}}}
	// A backend's own filters apply after the rule's.
	bf := rtBackend("b", 1)
	bf.Filters = []*pb.Filter{rtRequestHeaders(&pb.HeaderModifier{Set: rtHeaders("X-Backend-Filter", "b")})}
	backendFiltered := &pb.OutboundRule{Matches: []*pb.RouteMatch{rtPath(pb.PathMatch_PREFIX, "/bf")}, Backends: []*pb.Backend{bf}}
	pol := rtPolicy(rtRoute("web", headers, rewrite, backendFiltered))
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), pol, map[string][]netip.AddrPort{"b": {up.addr}})

	for _, en := range e.engines(t) {
		res, body := en.do(t, "GET", "/headers/x", nil, "X-Set", "client", "X-Add", "one", "X-Remove", "gone", "X-Other", "kept")
		if res.StatusCode != 200 || body != "b" {
			t.Fatalf("%s: %d %q", en.name, res.StatusCode, body)
		}
		got := up.last(t)
		if v := got.header.Values("X-Set"); !reflect.DeepEqual(v, []string{"set"}) {
			t.Errorf("%s: upstream X-Set %q, want [set]", en.name, v)
		}
		if v := got.header.Values("X-Add"); !reflect.DeepEqual(v, []string{"one", "two"}) {
			t.Errorf("%s: upstream X-Add %q, want [one two]", en.name, v)
		}
		if v, ok := got.header["X-Remove"]; ok {
			t.Errorf("%s: upstream got X-Remove %q, want it removed", en.name, v)
		}
		if got.header.Get("X-Other") != "kept" || got.uri != "/headers/x" || got.host != "web.ns" {
			t.Errorf("%s: upstream got X-Other %q, %s %s", en.name, got.header.Get("X-Other"), got.host, got.uri)
		}
		if res.Header.Get("X-Resp") != "proxy" || res.Header.Get("X-Added") != "yes" || res.Header.Get("X-Backend") != "b" {
			t.Errorf("%s: response X-Resp %q X-Added %q X-Backend %q, want proxy, yes, b", en.name,
				res.Header.Get("X-Resp"), res.Header.Get("X-Added"), res.Header.Get("X-Backend"))
		}
		if v, ok := res.Header["X-Secret"]; ok {
			t.Errorf("%s: client got X-Secret %q, want it removed", en.name, v)
		}

		if res, _ := en.do(t, "GET", "/v1/items/7?q=a%20b", nil); res.StatusCode != 200 {
			t.Fatalf("%s: rewrite: %d", en.name, res.StatusCode)
		}
		got = up.last(t)
		if got.host != "internal.example" || got.uri != "/v2/items/7?q=a%20b" {
			t.Errorf("%s: URLRewrite: upstream got Host %q target %q, want internal.example /v2/items/7?q=a%%20b", en.name, got.host, got.uri)
		}

		if res, _ := en.do(t, "GET", "/bf", nil); res.StatusCode != 200 {
			t.Fatalf("%s: backend filter: %d", en.name, res.StatusCode)
		}
		if v := up.last(t).header.Get("X-Backend-Filter"); v != "b" {
			t.Errorf("%s: backend filter: upstream X-Backend-Filter %q, want b", en.name, v)
		}
	}
}

func rtRedirect(rd *pb.RequestRedirect) *pb.Filter {
	return &pb.Filter{Kind: &pb.Filter_RequestRedirect{RequestRedirect: rd}}
}

// A redirect is answered by the proxy with its status and Location,
// whether or not the rule has backends (a Gateway API redirect usually
// has none), and nothing reaches an upstream.
func TestRouteRedirect(t *testing.T) {
	up := rtServe(t, "b", nil)
	moved := rtRule("b", rtPath(pb.PathMatch_PREFIX, "/old"))
	moved.Filters = []*pb.Filter{rtRedirect(&pb.RequestRedirect{Hostname: "new.example", Status: 301,
		Path: &pb.PathModifier{Kind: &pb.PathModifier_Prefix{Prefix: "/new"}}})}
	found := &pb.OutboundRule{Matches: []*pb.RouteMatch{rtPath(pb.PathMatch_PREFIX, "/secure")},
		Filters: []*pb.Filter{rtRedirect(&pb.RequestRedirect{Scheme: "https"})}}
	pol := rtPolicy(rtRoute("web", moved, found))
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), pol, map[string][]netip.AddrPort{"b": {up.addr}})
	for _, en := range e.engines(t) {
		for _, c := range []struct {
			target string
			status int
			loc    string
		}{
			{"/old/page?x=1", 301, "http://new.example/new/page?x=1"},
			{"/secure/login", 302, "https://web.ns/secure/login"},
		} {
			res, _ := en.do(t, "GET", c.target, nil)
			if res.StatusCode != c.status || res.Header.Get("Location") != c.loc {
				t.Errorf("%s %s: %d Location %q (%s), want %d %q", en.name, c.target, res.StatusCode, res.Header.Get("Location"),
					res.Header.Get(ErrorHeader), c.status, c.loc)
			}
		}
	}
	if n := up.hits.Load(); n != 0 {
		t.Errorf("upstream got %d requests, want none", n)
	}
	rtEventually(t, e.reg, "outbound_http_route_request_statuses_total", "web", 3, "http_status", "301", "error", "")
	rtEventually(t, e.reg, "outbound_http_route_request_statuses_total", "web", 3, "http_status", "302", "error", "")
}

// On one keep-alive connection to the fast path, a plain request, a
// filtered one (handed off to net/http with the bytes read so far) and a
// plain one again each get their own correct answer.
func TestRouteFilteredRuleIsHandedOffMidConnection(t *testing.T) {
	up := rtServe(t, "b", nil)
	filtered := rtRule("b", &pb.RouteMatch{Headers: []*pb.HeaderMatch{{Name: "X-Filter", Value: "yes"}}})
	filtered.Filters = []*pb.Filter{
		rtRequestHeaders(&pb.HeaderModifier{Set: rtHeaders("X-Filtered", "yes")}),
		rtResponseHeaders(&pb.HeaderModifier{Set: rtHeaders("X-Filtered-Response", "yes")}),
	}
	pol := rtPolicy(rtRoute("web", filtered, rtRule("b")))
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), pol, map[string][]netip.AddrPort{"b": {up.addr}})
	c, err := net.Dial("tcp", e.fastAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	for i, filter := range []string{"no", "yes", "no"} {
		seq := strconv.Itoa(i)
		res, body := get(t, c, r, "GET", "X-Seq: "+seq+"\r\nX-Filter: "+filter+"\r\n")
		got := up.last(t)
		wantFiltered := filter == "yes"
		if res.StatusCode != 200 || body != "b" || got.header.Get("X-Seq") != seq {
			t.Errorf("request %d: %d %q, upstream saw request %q", i, res.StatusCode, body, got.header.Get("X-Seq"))
		}
		if (got.header.Get("X-Filtered") == "yes") != wantFiltered || (res.Header.Get("X-Filtered-Response") == "yes") != wantFiltered {
			t.Errorf("request %d: upstream X-Filtered %q, client X-Filtered-Response %q; want them only on the filtered request",
				i, got.header.Get("X-Filtered"), res.Header.Get("X-Filtered-Response"))
		}
		if res.Close {
			t.Fatalf("request %d: the proxy closed the connection", i)
		}
	}
	if n := e.handoffs.Load(); n != 1 {
		t.Errorf("%d handoffs, want 1", n)
	}
	if n := up.hits.Load(); n != 3 {
		t.Errorf("upstream got %d requests, want 3", n)
	}
}
