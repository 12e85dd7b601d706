package httpproxy

import (
	"io"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// A request whose connection is refused reached no server: it is sent
// again to another endpoint whatever its method, and counted (a rolling
// update's gone endpoint costs no request). A plain rule: no route retry
// policy is involved. On net/http's engine a request with a body is not
// (its transport consumes the body on failure); a bodiless one is.
func TestResendToAnotherEndpointAfterConnectRefused(t *testing.T) {
	up := rtServe(t, "b", nil)
	ln := rtListen(t)
	gone := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	pol := rtPolicy(rtRoute("web", &pb.OutboundRule{Backends: []*pb.Backend{rtBackend("b", 1)}}))
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), pol, map[string][]netip.AddrPort{"b": {gone, up.addr}})
	for _, en := range e.engines(t) {
		for _, method := range []string{"GET", "POST"} {
			var body io.Reader
			if method == "POST" && en.name == "fast" {
				body = strings.NewReader("once")
			}
			if res, got := en.do(t, method, "/", body); res.StatusCode != 200 || got != "b" {
				t.Errorf("%s %s: %d %q (%s), want 200 from the live endpoint", en.name, method, res.StatusCode, got, res.Header.Get(ErrorHeader))
			}
		}
	}
	if n := counter(t, e.reg, "request_resent_total"); n < 1 {
		t.Errorf("request_resent_total = %v, want at least 1", n)
	}
}

// A POST whose connection broke after it was written may have been acted
// on: it is never sent again (502), while a GET is.
func TestNoResendOfAPostThatReachedAServer(t *testing.T) {
	var posts atomic.Int32
	up := rtServe(t, "b", func(w http.ResponseWriter, r *http.Request, n int) bool {
		if r.Method == "POST" {
			posts.Add(1)
			panic(http.ErrAbortHandler) // read it, then close without answering
		}
		return false
	})
	pol := rtPolicy(rtRoute("web", &pb.OutboundRule{Backends: []*pb.Backend{rtBackend("b", 1)}}))
	e := newRouteEnv(t, netip.MustParseAddrPort("127.0.0.1:1"), pol, map[string][]netip.AddrPort{"b": {up.addr}})
	en := e.engine(t, "fast")
	if res, _ := en.do(t, "POST", "/", strings.NewReader("once")); res.StatusCode != http.StatusBadGateway {
		t.Errorf("POST: %d, want 502", res.StatusCode)
	}
	if n := posts.Load(); n != 1 {
		t.Errorf("the server got the POST %d times, want 1", n)
	}
}

// Only a meshed peer's own "could not connect to my application" answer
// means the request reached no server.
func TestPeerNotReached(t *testing.T) {
	for _, c := range []struct {
		meshed bool
		status int
		reason string
		want   bool
	}{
		{true, 502, ReasonConnectRefused, true},
		{true, 503, ReasonDraining, true}, // its proxy is shutting down and forwarded nothing
		{false, 503, ReasonDraining, false},
		{false, 502, ReasonConnectRefused, false}, // an unmeshed server's header is not believed
		{true, 502, ReasonUpstreamReset, false},   // the application may have taken it
		{true, 503, ReasonConnectRefused, false},
		{true, 502, "", false},
	} {
		if got := peerNotReached(c.meshed, c.status, c.reason); got != c.want {
			t.Errorf("peerNotReached(%v, %d, %q) = %v, want %v", c.meshed, c.status, c.reason, got, c.want)
		}
	}
	if s, r := classify(errPeerNotReached); s != 502 || r != ReasonConnectRefused {
		t.Errorf("classify(errPeerNotReached) = %d %s, want 502 %s", s, r, ReasonConnectRefused)
	}
}

// A meshed peer's upstream-reset means its application broke before
// answering: re-sendable for idempotent requests only (the retry rule
// decides); anything else is relayed.
func TestPeerError(t *testing.T) {
	for _, c := range []struct {
		meshed bool
		status int
		reason string
		want   error
	}{
		{true, 502, ReasonConnectRefused, errPeerNotReached},
		{true, 502, ReasonUpstreamReset, errPeerAppFailed},
		{false, 502, ReasonUpstreamReset, nil},
		{true, 504, ReasonTimeout, nil},
		{true, 502, ReasonTLS, nil},
	} {
		if got := peerError(c.meshed, c.status, c.reason); got != c.want {
			t.Errorf("peerError(%v, %d, %q) = %v, want %v", c.meshed, c.status, c.reason, got, c.want)
		}
	}
	get := &exchange{req: &Request{Method: "GET", Replayable: true}}
	post := &exchange{req: &Request{Method: "POST", Replayable: true, ContentLength: 4}}
	if !get.retrySafe(errPeerAppFailed) || post.retrySafe(errPeerAppFailed) {
		t.Errorf("app failure: GET re-sent %v (want true), POST re-sent %v (want false)", get.retrySafe(errPeerAppFailed), post.retrySafe(errPeerAppFailed))
	}
	if !post.retrySafe(errPeerNotReached) {
		t.Error("a POST the peer could not deliver is not re-sent")
	}
}
