package httpproxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/authz"
	"github.com/plexus-mesh/plexus/mesh/policy/pathnorm"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// Spellings of paths against routes that tell /admin apart from the rest:
// on every engine (the HTTP/1 fast path, net/http's HTTP/1, h2c and gRPC
// over h2c), each is refused (400 invalid-path) or decided on and
// forwarded in its normal form. want is the outcome: "invalid", "admin"
// (the /admin route's: denied inbound, its backend outbound), or the
// normal target the application receives on the other route.
var pathSpellings = []struct{ target, want string }{
	{"/admin", "admin"},
	{"/admin/x", "admin"},
	{"/%61dmin", "admin"},
	{"/ad%6Din", "admin"},
	{"/%61%64%6d%69%6e/x", "admin"},
	{"/ADMIN", "/ADMIN"}, // paths are case-sensitive (Gateway API)
	{"/%41DMIN", "/ADMIN"},
	{"/administrator", "/administrator"}, // prefixes match whole segments
	{"/public/x", "/public/x"},
	{"/public/x?next=/admin/../y", "/public/x?next=/admin/../y"},
	{"/admin%20", "/admin%20"},
	{"/admin%3Bx", "/admin%3Bx"},
	{"/admin;x", "invalid"},
	{"/admin;x/y", "invalid"},
	{"/public/..;/admin", "invalid"},
	{"/public/..%2Fadmin", "invalid"},
	{"/public%2F..%2Fadmin", "invalid"},
	{"/admin%2fx", "invalid"},
	{"/admin%5Cx", "invalid"},
	{"/public/%2e%2e/admin", "invalid"},
	{"/public/%2E%2E/admin", "invalid"},
	{"/public/.%2e/admin", "invalid"},
	{"/public/../admin", "invalid"},
	{"/./admin", "invalid"},
	{"/public//admin", "invalid"},
	{"//admin", "invalid"},
	{"/public\\..\\admin", "invalid"},
	{"/%2561dmin", "invalid"},
	{"/admin%00", "invalid"},
	{"/admin#x", "invalid"},
	{"/a%zz", "invalid"},
}

// pathEngine sends one request with target as it is (no client-side
// cleaning) and returns the status, the proxy's error reason, the gRPC
// status and the target the application received ("" when none).
type pathEngine struct {
	name string
	do   func(addr, target string) (status int, reason, grpcStatus, seen string, err error)
}

func pathEngines() []pathEngine {
	h2 := func(grpc bool) func(addr, target string) (int, string, string, string, error) {
		return func(addr, target string) (int, string, string, string, error) {
			tr := &http.Transport{Protocols: new(http.Protocols)}
			tr.Protocols.SetUnencryptedHTTP2(true)
			defer tr.CloseIdleConnections()
			method, body := http.MethodGet, io.Reader(nil)
			if grpc {
				method, body = http.MethodPost, bytes.NewReader([]byte{0, 0, 0, 0, 0})
			}
			// Opaque is sent as :path as it is.
			req, _ := http.NewRequest(method, "http://web/", body)
			req.URL = &url.URL{Scheme: "http", Host: addr, Opaque: target}
			req.Host = "web"
			if grpc {
				req.Header.Set("Content-Type", "application/grpc")
				req.Header.Set("TE", "trailers")
			}
			res, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
			if err != nil {
				return 0, "", "", "", err
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			gs := res.Trailer.Get("Grpc-Status")
			if gs == "" {
				gs = res.Header.Get("Grpc-Status")
			}
			return res.StatusCode, res.Header.Get(ErrorHeader), gs, res.Header.Get("X-Seen"), nil
		}
	}
	h1 := func(addr, target string) (int, string, string, string, error) {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			return 0, "", "", "", err
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: web\r\nConnection: close\r\n\r\n", target)
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return 0, "", "", "", err
		}
		io.Copy(io.Discard, res.Body)
		return res.StatusCode, res.Header.Get(ErrorHeader), "", res.Header.Get("X-Seen"), nil
	}
	return []pathEngine{{"http1-fast", h1}, {"http1-nethttp", h1}, {"h2c", h2(false)}, {"grpc", h2(true)}}
}

// addrFor is where an engine's requests go: the fast path's listener
// (which hands off what it does not serve) or net/http's.
func (e *rtEnv) addrFor(en pathEngine) string {
	if en.name == "http1-fast" {
		return e.fastAddr
	}
	return e.httpAddr
}

// seenApp records the target each request arrived with.
func seenApp(t *testing.T) netip.AddrPort {
	return rtH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Seen", r.RequestURI)
		io.WriteString(w, "app")
	}))
}

// checkSpelling compares one engine's outcome for a spelling with want;
// admin is what the /admin route's outcome looks like.
func checkSpelling(t *testing.T, e pathEngine, addr, target, want string, isAdmin func(status int, reason, grpcStatus, seen string) bool) {
	t.Helper()
	if e.name != "http1-fast" && e.name != "http1-nethttp" && (strings.HasPrefix(target, "//") || strings.Contains(target, "#")) {
		return // not a :path a client sends (an authority, a fragment)
	}
	if _, perr := url.ParseRequestURI(target); perr != nil && (e.name == "h2c" || e.name == "grpc") {
		return // Go's HTTP/2 server resets the stream itself: the proxy never sees it
	}
	status, reason, gs, seen, err := e.do(addr, target)
	if _, perr := url.ParseRequestURI(target); perr != nil && want == "invalid" && e.name != "http1-fast" &&
		(err != nil || status == http.StatusBadRequest && reason == "") {
		return // net/http's own parser refused it first (a bad escape): the proxy never saw it
	}
	if e.name == "http1-nethttp" && strings.Contains(target, "#") {
		// net/http reads a raw "#" as data and encodes it ("/admin%23x":
		// not /admin to any application); the fast path refuses it.
		want = strings.ReplaceAll(target, "#", "%23")
	}
	if err != nil {
		t.Errorf("%s %q: %v", e.name, target, err)
		return
	}
	switch want {
	case "invalid":
		wantStatus, wantGS := http.StatusBadRequest, ""
		if e.name == "grpc" {
			wantStatus, wantGS = http.StatusOK, "13"
		}
		if status != wantStatus || reason != ReasonInvalidPath || gs != wantGS || seen != "" {
			t.Errorf("%s %q: %d %s grpc-status %q, the app saw %q; want %d %s (refused before the app)", e.name, target, status, reason, gs, seen, wantStatus, ReasonInvalidPath)
		}
	case "admin":
		if !isAdmin(status, reason, gs, seen) {
			t.Errorf("%s %q: %d %s grpc-status %q, the app saw %q; want the /admin route's outcome", e.name, target, status, reason, gs, seen)
		}
	default:
		if isAdmin(status, reason, gs, seen) || reason != "" || seen != want {
			t.Errorf("%s %q: %d %s grpc-status %q, the app saw %q; want it forwarded as %q on the other route", e.name, target, status, reason, gs, seen, want)
		}
	}
}

// Inbound: a route-level policy that lets no one reach /admin and anyone
// the rest, as the proxy enforces it (authz.Policy.Request).
func TestPathSpellingsAgainstRoutePolicy(t *testing.T) {
	app := seenApp(t)
	pol, err := authz.Compile(&pb.InboundPolicy{Server: &pb.ResourceRef{Kind: "Server", Name: "web"}, Routes: []*pb.InboundRoute{
		{Ref: &pb.ResourceRef{Kind: "HTTPRoute", Name: "admin"}, Matches: []*pb.RouteMatch{rtPath(pb.PathMatch_PREFIX, "/admin")}},
		{Ref: &pb.ResourceRef{Kind: "HTTPRoute", Name: "all"}, Matches: []*pb.RouteMatch{rtPath(pb.PathMatch_PREFIX, "/")},
			Authorizations: []*pb.Authorization{{Ref: &pb.ResourceRef{Kind: "default", Name: "all-unauthenticated"}}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var decided []string // the targets the policy was asked about
	e := newRouteEnv(t, app, rtPolicy(), nil, func(o *Options) {
		o.Direction, o.Routes = metrics.Inbound, nil
		o.Authorize = func(r *Request) authz.Decision {
			mu.Lock()
			decided = append(decided, r.Path)
			mu.Unlock()
			return pol.Request(&authz.Client{Addr: r.Client}, &routes.Request{Method: r.Method, Authority: r.Authority, Target: r.Path, Header: r.Header, GRPC: r.GRPC})
		}
	})
	denied := func(status int, reason, gs, seen string) bool {
		return seen == "" && reason == ReasonUnauthorized && (status == http.StatusForbidden || status == http.StatusOK && gs == "7")
	}
	for _, en := range pathEngines() {
		for _, s := range pathSpellings {
			checkSpelling(t, en, e.addrFor(en), s.target, s.want, denied)
		}
	}
	// What the policy decided on is in normal form: never a spelling.
	for _, p := range decided {
		if n, err := pathnorm.Target(p); err != nil || n != p {
			t.Errorf("the policy was asked about %q, not its normal form", p)
		}
	}
}

// Outbound: routes that send /admin to one backend and the rest to
// another, as traffic management does; the same rule.
func TestPathSpellingsAgainstOutboundRoutes(t *testing.T) {
	admin := rtH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Backend", "admin")
		io.WriteString(w, "admin")
	}))
	rest := seenApp(t)
	pol := rtPolicy(rtRoute("split", rtRule("admin", rtPath(pb.PathMatch_PREFIX, "/admin")), rtRule("rest", rtPath(pb.PathMatch_PREFIX, "/"))))
	e := newRouteEnv(t, rest, pol, map[string][]netip.AddrPort{"admin": {admin}, "rest": {rest}})
	toAdmin := func(status int, reason, gs, seen string) bool {
		return status == http.StatusOK && reason == "" && seen == "" && (gs == "" || gs == "0")
	}
	for _, en := range pathEngines() {
		for _, s := range pathSpellings {
			checkSpelling(t, en, e.addrFor(en), s.target, s.want, toAdmin)
		}
	}
}

// Without routes that tell paths apart, an ambiguous spelling is
// forwarded in normal form (an encoded "/" in a RabbitMQ vhost, a
// ";jsessionid" keep working); only a bad escape is refused.
func TestAmbiguousPathsPassWhereNoRouteTellsPathsApart(t *testing.T) {
	app := seenApp(t)
	e := newRouteEnv(t, app, rtPolicy(), nil, func(o *Options) {
		o.Routes = func(context.Context, netip.AddrPort) *routes.Table { return routes.Default() }
	})
	for _, en := range pathEngines()[:3] {
		addr := e.addrFor(en)
		for target, want := range map[string]string{"/api/vhosts/%2f/q": "/api/vhosts/%2F/q", "/cart;jsessionid=1": "/cart;jsessionid=1", "/%61pi": "/api"} {
			status, reason, _, seen, err := en.do(addr, target)
			if err != nil || status != http.StatusOK || reason != "" || seen != want {
				t.Errorf("%s %q: %d %s, the app saw %q, %v; want it forwarded as %q", en.name, target, status, reason, seen, err, want)
			}
		}
	}
}
