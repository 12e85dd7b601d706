package routes

import (
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

func headerModifier(set, add map[string]string, remove ...string) *pb.HeaderModifier {
	m := &pb.HeaderModifier{Remove: remove}
	for k, v := range set {
		m.Set = append(m.Set, &pb.Header{Name: k, Value: v})
	}
	for k, v := range add {
		m.Add = append(m.Add, &pb.Header{Name: k, Value: v})
	}
	return m
}

func reqHeaders(m *pb.HeaderModifier) *pb.Filter {
	return &pb.Filter{Kind: &pb.Filter_RequestHeaderModifier{RequestHeaderModifier: m}}
}

func respHeaders(m *pb.HeaderModifier) *pb.Filter {
	return &pb.Filter{Kind: &pb.Filter_ResponseHeaderModifier{ResponseHeaderModifier: m}}
}

func rewrite(host string, path *pb.PathModifier) *pb.Filter {
	return &pb.Filter{Kind: &pb.Filter_UrlRewrite{UrlRewrite: &pb.URLRewrite{Hostname: host, Path: path}}}
}

func redirectTo(rd *pb.RequestRedirect) *pb.Filter {
	return &pb.Filter{Kind: &pb.Filter_RequestRedirect{RequestRedirect: rd}}
}

func fullPath(p string) *pb.PathModifier {
	return &pb.PathModifier{Kind: &pb.PathModifier_Full{Full: p}}
}

func prefixPath(p string) *pb.PathModifier {
	return &pb.PathModifier{Kind: &pb.PathModifier_Prefix{Prefix: p}}
}

// filtered compiles one rule with matches ms, rule filters fs and one
// backend with filters bfs.
func filtered(t *testing.T, ms []*pb.RouteMatch, fs []*pb.Filter, bfs ...*pb.Filter) *Rule {
	t.Helper()
	r := rule(ms...)
	r.Filters = fs
	r.Backends[0].Filters = bfs
	tb := mustCompile(t, policy(route("r", nil, r)))
	return tb.Routes[0].Rules[0]
}

// filterTable compiles a rule with one match (nil: none) and one filter.
func filterTable(t *testing.T, m *pb.RouteMatch, f *pb.Filter) *Table {
	t.Helper()
	var ms []*pb.RouteMatch
	if m != nil {
		ms = append(ms, m)
	}
	return mustCompile(t, policy(route("r", nil, &pb.OutboundRule{Matches: ms, Filters: []*pb.Filter{f}})))
}

func TestRequestHeaderModifier(t *testing.T) {
	r := filtered(t, nil, []*pb.Filter{reqHeaders(headerModifier(
		map[string]string{"x-set": "s", "host": "other.ns"},
		map[string]string{"x-add": "a"},
		"x-remove"))})
	req := httptest.NewRequest("GET", "http://web.ns/p", nil)
	req.Header.Set("X-Set", "old")
	req.Header.Add("X-Set", "older")
	req.Header.Set("X-Add", "first")
	req.Header.Set("X-Remove", "gone")
	req.Header.Set("X-Keep", "k")
	r.RewriteRequest(r.Backends[0], req, "/")
	want := http.Header{"X-Set": {"s"}, "X-Add": {"first", "a"}, "X-Keep": {"k"}}
	if !reflect.DeepEqual(req.Header, want) {
		t.Errorf("header = %v, want %v", req.Header, want)
	}
	if req.Host != "other.ns" {
		t.Errorf("Host = %q", req.Host)
	}
	if r.Plain {
		t.Error("a rule with filters is Plain")
	}
}

func TestRequestHeaderModifierNilHeader(t *testing.T) {
	r := filtered(t, nil, []*pb.Filter{reqHeaders(headerModifier(map[string]string{"a": "1"}, nil))})
	req := httptest.NewRequest("GET", "/", nil)
	req.Header = nil
	r.RewriteRequest(nil, req, "/")
	if req.Header.Get("A") != "1" {
		t.Errorf("header = %v", req.Header)
	}
}

func TestBackendFiltersAfterRuleFilters(t *testing.T) {
	r := filtered(t, nil,
		[]*pb.Filter{reqHeaders(headerModifier(map[string]string{"x": "rule"}, nil)), respHeaders(headerModifier(map[string]string{"y": "rule"}, nil))},
		reqHeaders(headerModifier(map[string]string{"x": "backend"}, map[string]string{"b": "1"})),
		respHeaders(headerModifier(map[string]string{"y": "backend"}, nil, "server")))
	req := httptest.NewRequest("GET", "/", nil)
	r.RewriteRequest(r.Backends[0], req, "/")
	if got := req.Header; got.Get("X") != "backend" || got.Get("B") != "1" {
		t.Errorf("request header = %v", got)
	}
	h := http.Header{"Server": {"s"}, "Y": {"upstream"}}
	r.RewriteResponse(r.Backends[0], h)
	if !reflect.DeepEqual(h, http.Header{"Y": {"backend"}}) {
		t.Errorf("response header = %v", h)
	}
	h = http.Header{"Server": {"s"}}
	r.RewriteResponse(nil, h)
	if !reflect.DeepEqual(h, http.Header{"Server": {"s"}, "Y": {"rule"}}) {
		t.Errorf("response header, rule only = %v", h)
	}
}

func TestURLRewrite(t *testing.T) {
	cases := []struct {
		name     string
		match    *pb.RouteMatch
		filter   *pb.Filter
		target   string
		wantHost string
		wantPath string
		wantRaw  string
		wantURI  string
	}{
		{"hostname", nil, rewrite("api.ns", nil), "/a", "api.ns", "/a", "", "/a"},
		{"full path", nil, rewrite("", fullPath("/new")), "/a/b?q=1", "web.ns", "/new", "/new", "/new?q=1"},
		{"prefix", prefix("/foo"), rewrite("", prefixPath("/baz")), "/foo/bar", "web.ns", "/baz/bar", "/baz/bar", "/baz/bar"},
		{"prefix to /", prefix("/foo"), rewrite("", prefixPath("/")), "/foo/bar", "web.ns", "/bar", "/bar", "/bar"},
		{"prefix keeps escapes and query", prefix("/foo/"), rewrite("", prefixPath("/baz/")), "/foo/a%2Fb?x=%20", "web.ns", "/baz/a/b", "/baz/a%2Fb", "/baz/a%2Fb?x=%20"},
		{"prefix of /", nil, rewrite("", prefixPath("/v2")), "/a", "web.ns", "/v2/a", "/v2/a", "/v2/a"},
		{"both", prefix("/foo"), rewrite("api.ns", prefixPath("/")), "/foo", "api.ns", "/", "/", "/"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := filterTable(t, c.match, c.filter)
			req := httptest.NewRequest("GET", "http://web.ns"+c.target, nil)
			req.RequestURI = c.target
			mr := &Request{Method: "GET", Authority: req.Host, Target: c.target}
			rule, ok := tb.Match(mr)
			if !ok {
				t.Fatal("no match")
			}
			rule.RewriteRequest(nil, req, mr.MatchedPrefix)
			if req.Host != c.wantHost || req.URL.Host != "web.ns" {
				t.Errorf("Host %q URL.Host %q, want %q and web.ns", req.Host, req.URL.Host, c.wantHost)
			}
			if req.URL.Path != c.wantPath || (c.wantRaw != "" && req.URL.EscapedPath() != c.wantRaw) {
				t.Errorf("Path %q (escaped %q), want %q (%q)", req.URL.Path, req.URL.EscapedPath(), c.wantPath, c.wantRaw)
			}
			if req.RequestURI != c.wantURI {
				t.Errorf("RequestURI %q, want %q", req.RequestURI, c.wantURI)
			}
		})
	}
}

// TestReplacePrefixMatch is Gateway API's table for ReplacePrefixMatch.
func TestReplacePrefixMatch(t *testing.T) {
	cases := []struct{ path, prefix, with, want string }{
		{"/foo/bar", "/foo", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo", "/xyz/", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz", "/xyz/bar"},
		{"/foo/bar", "/foo/", "/xyz/", "/xyz/bar"},
		{"/foo", "/foo", "/xyz", "/xyz"},
		{"/foo/", "/foo", "/xyz", "/xyz/"},
		{"/foo/bar", "/foo", "", "/bar"},
		{"/foo/", "/foo", "", "/"},
		{"/foo", "/foo", "", "/"},
		{"/foo/", "/foo", "/", "/"},
		{"/foo", "/foo", "/", "/"},
		{"/foo/bar", "/foo", "/baz", "/baz/bar"},
		{"/foo/bar", "/foo", "/", "/bar"},
		{"/foo/bar", "/", "/baz", "/baz/foo/bar"},
		{"/foobar", "/foo", "/baz", "/foobar"}, // not matched: unchanged
		{"/other", "/foo", "/baz", "/other"},
	}
	for _, c := range cases {
		if got := replacePrefixMatch(c.path, c.prefix, c.with); got != c.want {
			t.Errorf("replacePrefixMatch(%q, %q, %q) = %q, want %q", c.path, c.prefix, c.with, got, c.want)
		}
	}
}

func TestRedirect(t *testing.T) {
	cases := []struct {
		name       string
		match      *pb.RouteMatch
		rd         *pb.RequestRedirect
		url        string
		tls        bool
		wantStatus int
		wantLoc    string
	}{
		{"default status, keeps the rest", nil, &pb.RequestRedirect{}, "http://web.ns:8080/a?q=1", false, 302, "http://web.ns:8080/a?q=1"},
		{"status 301", nil, &pb.RequestRedirect{Status: 301}, "http://web.ns/a", false, 301, "http://web.ns/a"},
		{"hostname keeps the port", nil, &pb.RequestRedirect{Hostname: "api.ns"}, "http://web.ns:8080/a", false, 302, "http://api.ns:8080/a"},
		{"scheme drops the request port", nil, &pb.RequestRedirect{Scheme: "https"}, "http://web.ns:8080/a", false, 302, "https://web.ns/a"},
		{"scheme and port", nil, &pb.RequestRedirect{Scheme: "https", Port: 8443}, "http://web.ns:8080/a", false, 302, "https://web.ns:8443/a"},
		{"default port left out", nil, &pb.RequestRedirect{Port: 80}, "http://web.ns:8080/a", false, 302, "http://web.ns/a"},
		{"https default port left out", nil, &pb.RequestRedirect{Scheme: "https", Port: 443}, "http://web.ns/a", false, 302, "https://web.ns/a"},
		{"tls request keeps https", nil, &pb.RequestRedirect{Hostname: "x.ns"}, "https://web.ns/a", true, 302, "https://x.ns/a"},
		{"full path", nil, &pb.RequestRedirect{Path: fullPath("/new")}, "http://web.ns/a/b?q", false, 302, "http://web.ns/new?q"},
		{"prefix path", prefix("/foo"), &pb.RequestRedirect{Path: prefixPath("/baz")}, "http://web.ns/foo/bar", false, 302, "http://web.ns/baz/bar"},
		{"prefix path to /", prefix("/foo"), &pb.RequestRedirect{Path: prefixPath("/")}, "http://web.ns/foo/bar", false, 302, "http://web.ns/bar"},
		{"everything", prefix("/foo"), &pb.RequestRedirect{Scheme: "https", Hostname: "x.ns", Port: 9443, Path: prefixPath("/v2"), Status: 301}, "http://web.ns/foo/a?b=c", false, 301, "https://x.ns:9443/v2/a?b=c"},
		{"ipv6 host", nil, &pb.RequestRedirect{Scheme: "http"}, "http://[fd00::1]:8080/a", false, 302, "http://[fd00::1]/a"},
		{"ipv6 host and port", nil, &pb.RequestRedirect{Port: 81}, "http://[fd00::1]/a", false, 302, "http://[fd00::1]:81/a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tb := filterTable(t, c.match, redirectTo(c.rd))
			req := httptest.NewRequest("GET", c.url, nil)
			req.URL.Scheme = "" // as a server sees it
			if c.tls {
				req.TLS = &tls.ConnectionState{}
			}
			mr := &Request{Method: "GET", Authority: req.Host, Target: req.RequestURI}
			rule, ok := tb.Match(mr)
			if !ok {
				t.Fatal("no match")
			}
			status, loc, ok := rule.Redirect(req, mr.MatchedPrefix)
			if !ok || status != c.wantStatus || loc != c.wantLoc {
				t.Errorf("Redirect = %d %q %v, want %d %q", status, loc, ok, c.wantStatus, c.wantLoc)
			}
		})
	}
}

func TestNoRedirect(t *testing.T) {
	r := filtered(t, nil, nil)
	if _, _, ok := r.Redirect(httptest.NewRequest("GET", "/", nil), "/"); ok {
		t.Error("a rule without a redirect redirects")
	}
	if !r.Plain {
		t.Error("a rule without filters, timeouts or retry is not Plain")
	}
}

func TestPlain(t *testing.T) {
	cases := []struct {
		name string
		edit func(*pb.OutboundRule)
		want bool
	}{
		{"bare", func(*pb.OutboundRule) {}, true},
		{"response classes only", func(r *pb.OutboundRule) {
			r.ResponseClasses = []*pb.ResponseClass{{Condition: statusIn(500, 599), IsFailure: true}}
		}, true},
		{"rule filter", func(r *pb.OutboundRule) { r.Filters = []*pb.Filter{respHeaders(headerModifier(nil, nil, "a"))} }, false},
		{"backend filter", func(r *pb.OutboundRule) {
			r.Backends[0].Filters = []*pb.Filter{reqHeaders(headerModifier(nil, nil, "a"))}
		}, false},
		{"redirect", func(r *pb.OutboundRule) { r.Filters = []*pb.Filter{redirectTo(&pb.RequestRedirect{})} }, false},
		{"timeout", func(r *pb.OutboundRule) { r.Timeouts = &pb.Timeouts{Idle: newDuration(1)} }, false},
		{"retry", func(r *pb.OutboundRule) { r.Retry = &pb.RetryPolicy{Limit: 1} }, false},
	}
	for _, c := range cases {
		r := rule()
		c.edit(r)
		table := mustCompile(t, policy(route("r", nil, r), route("bare", nil, rule())))
		if got := table.Routes[0].Rules[0].Plain; got != c.want {
			t.Errorf("%s: Plain = %v, want %v", c.name, got, c.want)
		}
		// The table beside a bare route's: plain only if every rule is.
		if got := table.Plain(); got != c.want {
			t.Errorf("%s beside a bare rule: Table.Plain = %v, want %v", c.name, got, c.want)
		}
	}
	var none *Table
	if !none.Plain() || !Default().Plain() {
		t.Error("a nil table or the default table is not Plain")
	}
}
