package proxy

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/authz"
	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/discovery"
	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

// fixedPolicies is InboundPolicies from a map the test changes.
type fixedPolicies struct {
	mu sync.Mutex
	by map[uint16]*authz.Policy
}

func (f *fixedPolicies) InboundPolicy(_ context.Context, port uint16) *authz.Policy {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.by[port]
}

func (f *fixedPolicies) set(t testing.TB, port uint16, p *pb.InboundPolicy) *authz.Policy {
	t.Helper()
	c, err := authz.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.by[port] = c
	return c
}

func policyOf(name string, authzs ...*pb.Authorization) *pb.InboundPolicy {
	return &pb.InboundPolicy{Server: &pb.ResourceRef{Kind: "default", Name: name}, Authorizations: authzs}
}

var (
	allUnauthenticated = &pb.Authorization{Ref: &pb.ResourceRef{Kind: "default", Name: "all-unauthenticated"}}
	onlyClientPod      = &pb.Authorization{Ref: &pb.ResourceRef{Group: "policy.plexus.dev", Kind: "AuthorizationPolicy", Name: "client-only"}, MeshTls: true, Identities: []string{clientPodID.String()}}
)

// The inbound proxy enforces the port's policy: HTTP requests by the
// client's identity (403, gRPC PERMISSION_DENIED), a port without a policy
// denied, opaque connections refused, and a policy change closes the live
// connections of clients it no longer lets in.
func TestInboundAuthorization(t *testing.T) {
	ca := testpki.New("mesh")
	app := serveLoopback(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") })})
	appAddr := netip.MustParseAddrPort(app)
	pols := &fixedPolicies{by: map[uint16]*authz.Policy{}}
	reg := prometheus.NewRegistry()
	in, inAddr := serveInbound(t, reg, appAddr, func(o *Options) { o.Certs, o.Inbound = ca.Source(serverPodID), pols })
	plain := func(grpc bool) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("POST", "http://"+inAddr.String()+"/", strings.NewReader(""))
		if grpc {
			req.Header.Set("Content-Type", "application/grpc")
		}
		res, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	out := start(t, func(_ *config.Config, o *Options) {
		o.Certs = ca.Source(clientPodID)
		o.Resolver = staticResolver{discovery.Endpoint{Addr: inAddr, Identity: serverPodID}}
	})
	out.to(app)
	meshed := func() int {
		t.Helper()
		res, err := out.client(false).Get("http://web/")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}
	port := appAddr.Port()

	// No policy yet: fail closed.
	if res := plain(false); res.StatusCode != 403 || res.Header.Get(httpproxy.ErrorHeader) != httpproxy.ReasonUnauthorized {
		t.Errorf("no policy: %d %q, want 403 %s", res.StatusCode, res.Header.Get(httpproxy.ErrorHeader), httpproxy.ReasonUnauthorized)
	}
	pols.set(t, port, policyOf("client-only", onlyClientPod))
	if res := plain(false); res.StatusCode != 403 {
		t.Errorf("client-only, plaintext: %d, want 403", res.StatusCode)
	}
	if res := plain(true); res.StatusCode != 200 || res.Header.Get("Grpc-Status") != "7" {
		t.Errorf("client-only, plaintext gRPC: %d grpc-status %q, want 200 with 7 PERMISSION_DENIED", res.StatusCode, res.Header.Get("Grpc-Status"))
	}
	if code := meshed(); code != 200 {
		t.Errorf("client-only, the client pod over mTLS: %d, want 200", code)
	}
	mfs, _ := reg.Gather()
	if n := sumSamples(mfs, "inbound_http_authz_allow_total", map[string]string{"authz_name": "client-only", "tls": "true", "srv_name": "client-only"}); n != 1 {
		t.Errorf("inbound_http_authz_allow_total{authz_name=client-only} = %v, want 1", n)
	}
	if n := sumSamples(mfs, "inbound_http_authz_deny_total", map[string]string{"dry_run": "false"}); n != 3 {
		t.Errorf("inbound_http_authz_deny_total = %v, want 3", n)
	}

	// Revocation: a keep-alive connection from a client the new policy
	// does not admit is closed.
	pols.set(t, port, policyOf("all-unauthenticated", allUnauthenticated))
	c, err := net.Dial("tcp", inAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: web\r\n\r\n")
	if res, err := http.ReadResponse(br, nil); err != nil || res.StatusCode != 200 {
		t.Fatalf("allowed keep-alive request: %v %v", res, err)
	} else {
		io.Copy(io.Discard, res.Body)
	}
	// The plaintext clients above closed their connections; wait until the
	// proxy has let go of them too, so only c is left to revoke.
	waitPlaintextConns(t, in, port, 1)
	in.Revoke(port, pols.set(t, port, policyOf("client-only", onlyClientPod)))
	c.SetReadDeadline(time.Now().Add(time.Second))
	if _, err := br.ReadByte(); err == nil || strings.Contains(err.Error(), "timeout") {
		t.Errorf("after the revocation the connection stayed open (%v)", err)
	}
	mfs, _ = reg.Gather()
	if n := sumSamples(mfs, "inbound_tcp_authz_terminate_total", map[string]string{"srv_name": "client-only"}); n != 1 {
		t.Errorf("inbound_tcp_authz_terminate_total = %v, want 1", n)
	}
}

// waitPlaintextConns waits until in tracks exactly n plaintext connections
// to port.
func waitPlaintextConns(t *testing.T, in *Proxy, port uint16, n int) {
	t.Helper()
	count := func() int {
		in.inbound.mu.Lock()
		defer in.inbound.mu.Unlock()
		got := 0
		for _, ic := range in.inbound.conns {
			if ic.port == port && !ic.tls.On {
				got++
			}
		}
		return got
	}
	got := 0
	if !eventually.Holds(5*time.Second, func() bool { got = count(); return got == n }) {
		t.Fatalf("the proxy tracks %d plaintext connections to port %d, want %d", got, port, n)
	}
}

// An opaque port's connections are authorized when they open: a denied
// client's connection is closed before any byte reaches the application.
func TestInboundOpaqueRefused(t *testing.T) {
	dst, reached := echoApp(t)
	pols := &fixedPolicies{by: map[uint16]*authz.Policy{}}
	reg := prometheus.NewRegistry()
	_, inAddr := serveInbound(t, reg, dst, func(o *Options) { o.Config.OpaquePorts.Add(dst.Port()); o.Inbound = pols })
	try := func() error {
		c, err := net.Dial("tcp", inAddr.String())
		if err != nil {
			return err
		}
		defer c.Close()
		io.WriteString(c, "ping")
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		buf := make([]byte, 4)
		_, err = io.ReadFull(c, buf)
		return err
	}
	pols.set(t, dst.Port(), policyOf("deny"))
	if err := try(); err == nil {
		t.Error("denied: the opaque connection carried data")
	}
	select {
	case <-reached:
		t.Error("denied: the application got a connection")
	default:
	}
	pols.set(t, dst.Port(), policyOf("all-unauthenticated", allUnauthenticated))
	if err := try(); err != nil {
		t.Errorf("allowed: %v", err)
	}
	mfs, _ := reg.Gather()
	if d, a := sumSamples(mfs, "inbound_tcp_authz_deny_total", nil), sumSamples(mfs, "inbound_tcp_authz_allow_total", nil); d != 1 || a != 1 {
		t.Errorf("tcp authz deny %v allow %v, want 1 and 1", d, a)
	}
}

// A Server's rate limit answers what exceeds it 429 rate-limited (gRPC
// RESOURCE_EXHAUSTED) and counts it.
func TestInboundRateLimit(t *testing.T) {
	app := serveLoopback(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") })})
	appAddr := netip.MustParseAddrPort(app)
	pols := &fixedPolicies{by: map[uint16]*authz.Policy{}}
	reg := prometheus.NewRegistry()
	_, inAddr := serveInbound(t, reg, appAddr, func(o *Options) { o.Inbound = pols })
	p := policyOf("all-unauthenticated", allUnauthenticated)
	p.RateLimit = &pb.RateLimit{Ref: &pb.ResourceRef{Group: "policy.plexus.dev", Kind: "HTTPLocalRateLimitPolicy", Name: "five"}, TotalPerSecond: 5}
	pols.set(t, appAddr.Port(), p)
	c := &http.Client{}
	statuses := map[int]int{}
	var limited *http.Response
	for i := range 20 {
		req, _ := http.NewRequest("GET", "http://"+inAddr.String()+"/", nil)
		if i == 19 {
			req.Header.Set("Content-Type", "application/grpc")
		}
		res, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		statuses[res.StatusCode]++
		if res.StatusCode == 429 {
			limited = res
		}
		if i == 19 && res.Header.Get("Grpc-Status") != "8" {
			t.Errorf("a gRPC request over the limit: grpc-status %q, want 8 RESOURCE_EXHAUSTED", res.Header.Get("Grpc-Status"))
		}
	}
	if statuses[200] < 1 || statuses[200] > 3 || limited == nil || limited.Header.Get(httpproxy.ErrorHeader) != httpproxy.ReasonRateLimited {
		t.Errorf("20 requests at once under 5/s: %v (last 429: %v), want 1-3 admitted and 429 %s", statuses, limited, httpproxy.ReasonRateLimited)
	}
	// The probe route is never limited.
	p.Routes = []*pb.InboundRoute{
		{Ref: &pb.ResourceRef{Kind: "default", Name: "probe"}, Matches: []*pb.RouteMatch{{Method: "GET", Path: &pb.PathMatch{Kind: pb.PathMatch_EXACT, Value: "/healthz"}}},
			Authorizations: []*pb.Authorization{{Ref: &pb.ResourceRef{Kind: "default", Name: "probe"}}}},
		{Ref: &pb.ResourceRef{Kind: "default", Name: "default"}},
	}
	pols.set(t, appAddr.Port(), p)
	for range 20 {
		res, err := c.Get("http://" + inAddr.String() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("a probe request over the limit: %d, want 200 (probes are not limited)", res.StatusCode)
		}
	}
	mfs, _ := reg.Gather()
	if n := sumSamples(mfs, "inbound_http_local_ratelimit_total", map[string]string{"ratelimit_name": "five"}); n < 16 {
		t.Errorf("inbound_http_local_ratelimit_total = %v, want the refused requests (≥ 16)", n)
	}
}

// A connection to an HTTP port whose bytes turn out not to be HTTP is
// forwarded as opaque TCP: it is authorized as a connection first (it
// used to skip authorization altogether).
func TestInboundDetectedOpaqueAuthorized(t *testing.T) {
	dst, reached := echoApp(t)
	pols := &fixedPolicies{by: map[uint16]*authz.Policy{}}
	_, inAddr := serveInbound(t, prometheus.NewRegistry(), dst, func(o *Options) { o.Inbound = pols })
	pols.set(t, dst.Port(), policyOf("client-only", onlyClientPod))
	c, err := net.Dial("tcp", inAddr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{0x16, 0x00, 0xff, 'n', 'o', 't', ' ', 'h', 't', 't', 'p', '\r', '\n'})
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := c.Read(make([]byte, 16)); err == nil {
		t.Errorf("a plaintext client's non-HTTP bytes were relayed (%d bytes back) past a client-only policy", n)
	}
	select {
	case <-reached:
		t.Error("the application got the denied client's connection")
	case <-time.After(100 * time.Millisecond):
	}
}

// echoApp is an application on loopback that echoes what it reads; reached
// receives a value per connection it accepts.
func echoApp(t *testing.T) (netip.AddrPort, chan struct{}) {
	echo, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { echo.Close() })
	reached := make(chan struct{}, 4)
	go func() {
		for {
			c, err := echo.Accept()
			if err != nil {
				return
			}
			reached <- struct{}{}
			go io.Copy(c, c)
		}
	}()
	return netip.MustParseAddrPort(echo.Addr().String()), reached
}
