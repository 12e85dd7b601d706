package tap

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/plexus-mesh/plexus/mesh/api/tappb"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

func info(dir, method, path string) *Info {
	return &Info{Direction: dir, Method: method, Path: path, Authority: "web.demo:80",
		Source: netip.MustParseAddrPort("10.0.0.1:0"), Destination: netip.MustParseAddrPort("10.0.0.2:8080"),
		Headers: func(fn func(string, string)) {
			fn("Authorization", "Bearer secret")
			fn("Cookie", "a=b")
			fn("X-Api-Key", "k")
			fn("Accept", "text/plain")
		}}
}

func TestNoSessionTakesNothing(t *testing.T) {
	h := NewHub(nil)
	if h.Active() {
		t.Fatal("a new hub is active")
	}
	var nilHub *Hub
	if nilHub.Active() {
		t.Fatal("a nil hub is active")
	}
	if got := h.Start(info("inbound", "GET", "/")); got != nil {
		t.Fatalf("Start with no session = %v, want nil", got)
	}
	// A nil Tapped takes the later events.
	var tp *Tapped
	tp.Response(200)
	tp.End(200, "", "", -1)
}

func open(t *testing.T, h *Hub, req *tappb.ObserveRequest) *session {
	t.Helper()
	s, err := newSession(req)
	if err != nil {
		t.Fatal(err)
	}
	if !h.add(s) {
		t.Fatal("session refused")
	}
	t.Cleanup(func() { h.remove(s) })
	return s
}

func TestFilterAndEvents(t *testing.T) {
	h := NewHub(nil)
	s := open(t, h, &tappb.ObserveRequest{Filter: &tappb.Filter{Direction: "inbound", Method: "GET", PathPrefix: "/books",
		SourceAddrs: []string{"10.0.0.1"}}, RedactHeaders: []string{"X-Api-Key"}, MaxRps: 1000})
	for _, c := range []struct {
		info *Info
		want bool
	}{
		{info("inbound", "GET", "/books/1"), true},
		{info("outbound", "GET", "/books/1"), false},
		{info("inbound", "POST", "/books/1"), false},
		{info("inbound", "GET", "/votes"), false},
	} {
		tp := h.Start(c.info)
		if (tp != nil) != c.want {
			t.Errorf("%s %s %s: tapped %v, want %v", c.info.Direction, c.info.Method, c.info.Path, tp != nil, c.want)
		}
		tp.Response(201)
		tp.End(201, "0", "", 12)
	}
	var evs []*tappb.TapEvent
	for len(s.queue) > 0 {
		evs = append(evs, <-s.queue)
	}
	if len(evs) != 3 {
		t.Fatalf("%d events, want 3 (start, response, end)", len(evs))
	}
	rs := evs[0].GetRequestStart()
	if rs == nil || rs.Path != "/books/1" || evs[0].Source != "10.0.0.1" || evs[0].Destination != "10.0.0.2:8080" {
		t.Fatalf("request start = %v", evs[0])
	}
	heads := map[string]string{}
	for _, hd := range rs.Headers {
		heads[hd.Name] = hd.Value
	}
	for _, n := range []string{"authorization", "cookie", "x-api-key"} {
		if heads[n] != Redacted {
			t.Errorf("header %s = %q, want redacted", n, heads[n])
		}
	}
	if heads["accept"] != "text/plain" {
		t.Errorf("accept = %q", heads["accept"])
	}
	if st := evs[1].GetResponseStart(); st == nil || st.Status != 201 {
		t.Errorf("response start = %v", evs[1])
	}
	if end := evs[2].GetResponseEnd(); end == nil || !end.HasGrpcStatus || end.GrpcStatus != 0 || end.ResponseBytes != 12 || end.SinceRequestNanos <= 0 {
		t.Errorf("response end = %v", evs[2])
	}
	if evs[0].Id != evs[2].Id {
		t.Errorf("ids differ: %d, %d", evs[0].Id, evs[2].Id)
	}
}

func TestBadFilter(t *testing.T) {
	for _, req := range []*tappb.ObserveRequest{
		{Filter: &tappb.Filter{Direction: "sideways"}},
		{Filter: &tappb.Filter{DestinationAddrs: []string{"web"}}},
		{MaxRps: -1},
	} {
		if _, err := newSession(req); err == nil {
			t.Errorf("%v: accepted", req)
		}
	}
}

func TestRateAndLimit(t *testing.T) {
	h := NewHub(nil)
	s := open(t, h, &tappb.ObserveRequest{MaxRps: 10})
	n := 0
	for range 1000 {
		if tp := h.Start(info("inbound", "GET", "/")); tp != nil {
			n++
			tp.End(200, "", "", -1)
		}
	}
	if n < 1 || n > 3 {
		t.Errorf("max_rps 10: %d of 1000 requests at once taken, want 1-3", n)
	}
	_ = s
	l := open(t, h, &tappb.ObserveRequest{MaxRps: 1e6, Limit: 5})
	for range 20 {
		if tp := h.Start(info("inbound", "GET", "/")); tp != nil {
			tp.End(200, "", "", -1)
		}
	}
	select {
	case <-l.done:
	default:
		t.Fatal("limit 5 reached, session not done")
	}
	if got := l.seq.Load(); got != 5 {
		t.Errorf("limit 5: %d requests taken", got)
	}
	// However low the rate (a tap split across many pods), the first
	// request is taken at once, and the next not before its time.
	slow := NewHub(nil)
	open(t, slow, &tappb.ObserveRequest{MaxRps: 0.01})
	taken := 0
	for range 100 {
		if tp := slow.Start(info("inbound", "GET", "/")); tp != nil {
			taken++
			tp.End(200, "", "", -1)
		}
	}
	if taken != 1 {
		t.Errorf("max_rps 0.01: %d of 100 requests at once taken, want the first", taken)
	}
}

// TestSlowReaderDrops: a session whose reader is gone keeps at most
// QueueLen events; the rest are dropped and counted.
func TestSlowReaderDrops(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := NewHub(reg)
	s := open(t, h, &tappb.ObserveRequest{MaxRps: 1e9})
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 100_000 {
		tp := h.Start(info("inbound", "GET", "/x"))
		tp.Response(200)
		tp.End(200, "", "", -1)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if len(s.queue) != QueueLen {
		t.Errorf("queue holds %d, want %d", len(s.queue), QueueLen)
	}
	want := uint64(300_000 - QueueLen)
	if got := s.dropped.Load(); got != want {
		t.Errorf("dropped %d, want %d", got, want)
	}
	if got := testutil.ToFloat64(h.dropped); got != float64(want) {
		t.Errorf("tap_events_dropped_total = %v, want %d", got, want)
	}
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 5<<20 {
		t.Errorf("heap grew %d bytes for a stalled tapper, want under 5 MiB", grew)
	}
	// With the queue full, a request's events are not even built.
	i := info("inbound", "GET", "/x")
	if allocs := testing.AllocsPerRun(1000, func() {
		tp := h.Start(i)
		tp.Response(200)
		tp.End(200, "", "", -1)
	}); allocs != 0 {
		t.Errorf("a request offered to a full session allocated %v times, want 0", allocs)
	}
}

func TestMaxSessions(t *testing.T) {
	h := NewHub(nil)
	for range MaxSessions {
		open(t, h, &tappb.ObserveRequest{})
	}
	s, _ := newSession(&tappb.ObserveRequest{})
	if h.add(s) {
		t.Fatal("session over MaxSessions accepted")
	}
}

// TestServerIdentity: the server streams to the tap identity and refuses
// any other, at the handshake.
func TestServerIdentity(t *testing.T) {
	ca := testpki.New("test")
	tapID := spiffe.New("cluster.local", "plexus-viz", "plexus-tap")
	proxyID := spiffe.New("cluster.local", "demo", "web")
	h := NewHub(nil)
	srv := NewServer(ServerOptions{Hub: h, Certs: ca.Source(proxyID), Allowed: tapID})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go Serve(srv, ln)
	defer srv.Stop()

	dial := func(id spiffe.ID) tappb.TapClient {
		src := ca.Source(id)
		cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: src.Roots(), ServerName: "unused",
			InsecureSkipVerify: true, Certificates: []tls.Certificate{*src.Cert}}
		cc, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return tappb.NewTapClient(cc)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	otherID := spiffe.New("cluster.local", "demo", "load")
	other, err := dial(otherID).Observe(ctx, &tappb.ObserveRequest{})
	if err == nil {
		_, err = other.Recv()
	}
	// Under TLS 1.3 the client's handshake ends before the server judges
	// its certificate, so the gRPC error may be the alert or a broken pipe.
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("another identity: %v, want Unavailable", err)
	}
	if h.Active() {
		t.Fatal("another identity opened a session")
	}
	// Read, not write, after the handshake: the server's alert is what ends
	// the connection.
	src := ca.Source(otherID)
	conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{MinVersion: tls.VersionTLS13,
		InsecureSkipVerify: true, Certificates: []tls.Certificate{*src.Cert}, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "remote error: tls") {
		t.Fatalf("another identity's raw TLS read: %v, want the server's alert", err)
	}

	stream, err := dial(tapID).Observe(ctx, &tappb.ObserveRequest{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, 5*time.Second, "the tap session open", h.Active)
	tp := h.Start(info("inbound", "GET", "/hello"))
	tp.Response(200)
	tp.End(200, "", "", -1)
	ev, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if ev.GetRequestStart().GetPath() != "/hello" {
		t.Fatalf("first event = %v", ev)
	}
}

// TestHostileRequestStrings: bytes that are not UTF-8, and long values
// cut inside a character, still make events a stream can carry, bounded.
func TestHostileRequestStrings(t *testing.T) {
	h := NewHub(nil)
	s := open(t, h, &tappb.ObserveRequest{MaxRps: 1000})
	long := strings.Repeat("a", MaxHeaderValue-1) + "é" + strings.Repeat("b", 100)
	tp := h.Start(&Info{Direction: "inbound", Method: "G\xffT", Authority: "h\xfe", Path: "/" + strings.Repeat("p", 70_000),
		Headers: func(fn func(string, string)) {
			fn("X-Bin", "\xff\xfe")
			fn("X-Long", long)
			for i := range 100 {
				fn(fmt.Sprintf("x-%d", i), strings.Repeat("v", 200))
			}
		}})
	tp.End(200, "", "", 0)
	ev := <-s.queue
	b, err := proto.Marshal(ev)
	if err != nil {
		t.Fatalf("the event cannot be sent: %v", err)
	}
	if len(b) > 8<<10 {
		t.Errorf("event of %d bytes, want under 8 KiB", len(b))
	}
	rs := ev.GetRequestStart()
	if rs.Headers[1].Value != strings.Repeat("a", MaxHeaderValue-1)+"…" {
		t.Errorf("long value cut to %q, want cut before the é", rs.Headers[1].Value)
	}
	if rs.Authority != "h\uFFFD" {
		t.Errorf("authority = %q", rs.Authority)
	}
}

// startEvent offers one request to a session of req and returns its
// request-start event (nil: not taken).
func startEvent(t *testing.T, req *tappb.ObserveRequest, i *Info) *tappb.RequestStart {
	t.Helper()
	h := NewHub(nil)
	if req.MaxRps == 0 {
		req.MaxRps = 1000
	}
	s := open(t, h, req)
	tp := h.Start(i)
	if tp == nil {
		return nil
	}
	tp.End(200, "", "", 0)
	return (<-s.queue).GetRequestStart()
}

func headerMap(rs *tappb.RequestStart) map[string]string {
	m := map[string]string{}
	for _, hd := range rs.GetHeaders() {
		m[hd.Name] = hd.Value
	}
	return m
}

// secretInfo is a request whose headers and query carry secrets.
func secretInfo(path string) *Info {
	return &Info{Direction: "inbound", Method: "GET", Path: path, Authority: "web",
		Source: netip.MustParseAddrPort("10.0.0.1:0"), Destination: netip.MustParseAddrPort("10.0.0.2:8080"),
		Headers: func(fn func(string, string)) {
			fn("Authorization", "Bearer a")
			fn("X-Api-Key", "k")
			fn("X-Auth-Token", "t")
			fn("X-Amz-Security-Token", "s")
			fn("X-Goog-Api-Key", "g")
			fn("X-Csrf-Token", "c")
			fn("Set-Cookie", "sid=1")
			fn("X-Client-Secret", "cs")
			fn("X-Db-Password", "pw")
			fn("X-Tenant", "acme")
			fn(strings.Repeat("x", 100)+"-token", "long") // its name is cut in the event
			fn("Accept", "text/plain")
		}}
}

// TestDefaultRedaction: with no list from the tapper, headers and query
// parameters that commonly carry secrets show as REDACTED; the rest, and
// the parameters' names, as they are.
func TestDefaultRedaction(t *testing.T) {
	rs := startEvent(t, &tappb.ObserveRequest{}, secretInfo("/cb?code=abc&page=2&access_token=eyJ&X-Amz-Signature=f00&state=s"))
	heads := headerMap(rs)
	for _, n := range []string{"authorization", "x-api-key", "x-auth-token", "x-amz-security-token", "x-goog-api-key", "x-csrf-token",
		"set-cookie", "x-client-secret", "x-db-password", headerName(strings.Repeat("x", 100) + "-token")} {
		if heads[n] != Redacted {
			t.Errorf("header %s = %q, want redacted by default", n, heads[n])
		}
	}
	if heads["accept"] != "text/plain" || heads["x-tenant"] != "acme" {
		t.Errorf("headers %v: accept and x-tenant should show", heads)
	}
	if want := "/cb?code=REDACTED&page=2&access_token=REDACTED&X-Amz-Signature=REDACTED&state=s"; rs.Path != want {
		t.Errorf("path = %q, want %q", rs.Path, want)
	}
}

// TestRedactionLists: a tapper widens the defaults (redact_headers,
// redact_query_params) and narrows them (show_headers,
// show_query_params), never to authorization, cookie or
// proxy-authorization.
func TestRedactionLists(t *testing.T) {
	rs := startEvent(t, &tappb.ObserveRequest{RedactHeaders: []string{"X-Tenant"}, RedactQueryParams: []string{"Tenant"},
		ShowHeaders:     []string{"x-api-key", "Authorization", "set-cookie"},
		ShowQueryParams: []string{"code"}}, secretInfo("/cb?code=abc&tenant=acme&token=t"))
	heads := headerMap(rs)
	for n, want := range map[string]string{"x-tenant": Redacted, "x-api-key": "k", "set-cookie": "sid=1", "authorization": Redacted,
		"x-auth-token": Redacted, "accept": "text/plain"} {
		if heads[n] != want {
			t.Errorf("header %s = %q, want %q", n, heads[n], want)
		}
	}
	if want := "/cb?code=abc&tenant=REDACTED&token=REDACTED"; rs.Path != want {
		t.Errorf("path = %q, want %q", rs.Path, want)
	}
	// Each list is bounded in names and their length.
	many := make([]string, MaxRedactionNames+1)
	for i := range many {
		many[i] = fmt.Sprintf("x-%d", i)
	}
	for name, req := range map[string]*tappb.ObserveRequest{
		"redact_query_params": {RedactQueryParams: many}, "show_headers": {ShowHeaders: many},
		"show_query_params": {ShowQueryParams: []string{strings.Repeat("p", MaxName+1)}}, "redact_headers": {RedactHeaders: many},
	} {
		if _, err := newSession(req); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s too long: %v, want refused", name, err)
		}
	}
}

// TestPathPrefixSeesRedactedPath: a path prefix cannot test a redacted
// value (a character at a time): one that reaches into the query is
// matched against the path as the events show it.
func TestPathPrefixSeesRedactedPath(t *testing.T) {
	path := "/cb?state=s&code=abc"
	for prefix, want := range map[string]bool{
		"/cb":                       true,
		"/cb?state=s":               true,
		"/cb?state=s&code=a":        false,
		"/cb?state=s&code=abc":      false,
		"/cb?state=s&code=REDACTED": true,
		"/cb?state=t":               false,
		"/db?":                      false,
	} {
		rs := startEvent(t, &tappb.ObserveRequest{Filter: &tappb.Filter{PathPrefix: prefix}}, secretInfo(path))
		if (rs != nil) != want {
			t.Errorf("prefix %q: taken %v, want %v", prefix, rs != nil, want)
		}
	}
	// Shown, the value matches again.
	if rs := startEvent(t, &tappb.ObserveRequest{Filter: &tappb.Filter{PathPrefix: "/cb?state=s&code=a"}, ShowQueryParams: []string{"code"}}, secretInfo(path)); rs == nil {
		t.Error("a prefix into a shown parameter's value did not match")
	}
}

// TestHostilePathRedaction: a long path is cut before it is redacted (the
// work is bounded) and after (a redacted value grows), and no secret of
// it is shown, cut or not.
func TestHostilePathRedaction(t *testing.T) {
	var b strings.Builder
	b.WriteString("/x?")
	for b.Len() < 70_000 {
		b.WriteString("k=a&token=secret&")
	}
	rs := startEvent(t, &tappb.ObserveRequest{}, &Info{Direction: "inbound", Path: b.String()})
	if len(rs.Path) > MaxValue+len("…") || strings.Contains(rs.Path, "secret") || !strings.HasPrefix(rs.Path, "/x?k=a&token=REDACTED&k=a&") {
		t.Errorf("path of %d bytes: %.80q…", len(rs.Path), rs.Path)
	}
}
