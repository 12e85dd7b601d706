package discovery

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/fakedestination"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

var (
	destID  = spiffe.New("cluster.local", "plexus-system", "plexus-destination")
	proxyID = spiffe.New("cluster.local", "shop", "client")
	webID   = spiffe.New("cluster.local", "shop", "web")
	svc     = netip.MustParseAddrPort("10.96.0.10:80")
)

type env struct {
	t    *testing.T
	ca   *testpki.CA
	srv  *fakedestination.Server
	addr string
	r    *Resolver
	reg  *prometheus.Registry
}

// newEnv serves destination over TLS (the destination identity) on
// loopback and connects a Resolver to it over mTLS with Dial.
func newEnv(t *testing.T, mut func(*Options)) *env {
	e := &env{t: t, ca: testpki.New("mesh"), reg: prometheus.NewRegistry()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	e.addr = ln.Addr().String()
	e.serve(ln)
	cc, err := Dial(e.addr, e.ca.Source(proxyID), destID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	opts := Options{
		Client: destinationpb.NewDestinationClient(cc), Log: slog.New(slog.DiscardHandler), Registerer: e.reg,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond,
		Probe: unreachable, // the endpoints' addresses are made up: no probe leaves the machine
	}
	if mut != nil {
		mut(&opts)
	}
	e.r = New(opts)
	t.Cleanup(e.r.Close)
	return e
}

// unreachable is a probe of a dead node: it times out.
func unreachable(ctx context.Context, _ netip.AddrPort) error {
	<-ctx.Done()
	return ctx.Err()
}

// serve starts the destination server on ln.
func (e *env) serve(ln net.Listener) {
	e.srv = fakedestination.Serve(ln, e.ca, destID)
	e.t.Cleanup(e.srv.Stop)
}

var (
	add    = fakedestination.Add
	remove = fakedestination.Remove
	wa     = fakedestination.Endpoint
)

// picks does n sequential picks (each Done before the next) and counts addresses.
func (e *env) picks(n int) map[string]int {
	e.t.Helper()
	seen := map[string]int{}
	for range n {
		p, err := e.r.Pick(context.Background(), svc)
		if err != nil {
			e.t.Fatal(err)
		}
		seen[p.Addr.String()]++
		p.Done()
	}
	return seen
}

func within(t *testing.T, d time.Duration, what string, ok func() bool) time.Duration {
	t.Helper()
	t0 := time.Now()
	eventually.Within(t, d, what, ok)
	return time.Since(t0)
}

// TestScaleUpSpreadsAndRemoveApplies: 1 endpoint, then 3 (every pick
// spreads over all three at once), then one removed (never picked again).
func TestScaleUpSpreadsAndRemoveApplies(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID)))
	p, err := e.r.Pick(context.Background(), svc)
	if err != nil || p.Fallback || p.Addr.String() != "10.1.0.1:8080" || p.Identity != webID || p.Labels["service"] != "web" || p.Labels["pod"] == "" {
		t.Fatalf("first pick = %+v, %v", p, err)
	}
	p.Done()
	if got := e.picks(10); got["10.1.0.1:8080"] != 10 {
		t.Fatalf("picks = %v", got)
	}
	e.srv.Push(svc.String(), add(wa("10.1.0.2:8080", webID), wa("10.1.0.3:8080", spiffe.ID{})))
	el := within(t, time.Second, "picks spread over 3 endpoints", func() bool { return len(e.picks(30)) == 3 })
	t.Logf("scale-up visible after %s", el)
	// Equal endpoints (no response times yet, nothing in flight): power of
	// two choices with ties broken at random spreads evenly.
	for a, n := range e.picks(300) {
		if n < 60 {
			t.Errorf("300 sequential picks gave %s only %d, want about 100 each", a, n)
		}
	}
	e.srv.Push(svc.String(), remove(wa("10.1.0.2:8080", spiffe.ID{})))
	// 60 picks: with random pairs, 6 could miss an endpoint still there
	// by chance (about 9 %), and the wait would end before the removal.
	el = within(t, time.Second, "removed endpoint no longer picked", func() bool { return e.picks(60)["10.1.0.2:8080"] == 0 })
	t.Logf("removal visible after %s", el)
	if got := e.picks(20); len(got) != 2 || got["10.1.0.2:8080"] != 0 {
		t.Errorf("after removal = %v", got)
	}
	if v := testutil.ToFloat64(e.r.lookups.WithLabelValues(ResultEndpoints)); v < 60 {
		t.Errorf("lookups{endpoints} = %v", v)
	}
}

// TestLeastLoaded: an endpoint with requests in flight is avoided.
func TestLeastLoaded(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID), wa("10.1.0.2:8080", webID)))
	busy, err := e.r.Pick(context.Background(), svc)
	if err != nil {
		t.Fatal(err)
	}
	got := e.picks(10)
	if got[busy.Addr.String()] != 0 {
		t.Errorf("busy endpoint %s picked: %v", busy.Addr, got)
	}
	busy.Done()
	if got := e.picks(40); len(got) != 2 {
		t.Errorf("after Done: %v", got)
	}
}

func TestNoEndpointsAndNotFound(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.FailFastTimeout = 100 * time.Millisecond })
	known := netip.MustParseAddrPort("10.96.0.11:80")
	e.srv.Set(known.String(), fakedestination.NoEndpoints(true))
	if _, err := e.r.Pick(context.Background(), known); !errors.Is(err, ErrNoEndpoints) {
		t.Errorf("exists=true: err = %v, want ErrNoEndpoints", err)
	}
	p, err := e.r.Pick(context.Background(), svc) // not in the snapshot: exists=false
	if err != nil || !p.Fallback || p.Addr != svc || !p.Identity.IsZero() {
		t.Errorf("exists=false: %+v, %v; want fallback to the original destination", p, err)
	}
	p.Done()
	// Endpoints arrive later for the known service.
	e.srv.Push(known.String(), add(wa("10.1.0.9:80", webID)))
	within(t, time.Second, "endpoints after no-endpoints", func() bool {
		p, err := e.r.Pick(context.Background(), known)
		p.Done()
		return err == nil && p.Addr.String() == "10.1.0.9:80"
	})
	// The last endpoint removed: the service still exists, so fail.
	e.srv.Push(known.String(), remove(wa("10.1.0.9:80", spiffe.ID{})))
	within(t, time.Second, "no endpoints after removal", func() bool {
		_, err := e.r.Pick(context.Background(), known)
		return errors.Is(err, ErrNoEndpoints)
	})
}

// TestUnavailableWhenEmpty: a route backend is unavailable once
// destination answers it with no endpoints, and not while it has one;
// the original destination never is.
func TestUnavailableWhenEmpty(t *testing.T) {
	e := newEnv(t, nil)
	const authority = "web.shop.svc.cluster.local:80"
	b := &routes.Backend{Authority: authority}
	e.srv.Set(authority, fakedestination.NoEndpoints(true))
	within(t, time.Second, "empty once answered with none", func() bool { return e.r.Unavailable(b) })
	e.srv.Push(authority, add(wa("10.1.0.9:80", webID)))
	within(t, time.Second, "not empty with an endpoint", func() bool { return !e.r.Unavailable(b) })
	if e.r.Unavailable(&routes.Backend{}) || e.r.Unavailable(nil) {
		t.Error("the original destination counted as empty")
	}
}

// TestUnavailableWhenAllDown: a route backend whose every endpoint is
// marked down (a connection refused) is unavailable until one is reached
// again (its probe connects); one down of two is not.
func TestUnavailableWhenAllDown(t *testing.T) {
	var reachable atomic.Bool
	e := newEnv(t, func(o *Options) {
		o.Probe = probeWhile(&reachable)
	})
	const authority = "web.shop.svc.cluster.local:80"
	b := &routes.Backend{Authority: authority}
	e.srv.Set(authority, add(wa("10.1.0.1:8080", webID), wa("10.1.0.2:8080", webID)))
	within(t, time.Second, "answered", func() bool {
		p, err := e.r.PickHTTP(context.Background(), netip.AddrPort{}, b)
		if err == nil {
			p.Done()
		}
		return err == nil
	})
	fail := func(addr string) {
		t.Helper()
		for range 100 {
			p, err := e.r.PickHTTP(context.Background(), netip.AddrPort{}, b)
			if err != nil {
				t.Fatal(err)
			}
			hit := p.Addr.String() == addr
			if hit {
				p.ConnectFailed()
			}
			p.Done()
			if hit {
				return
			}
		}
		t.Fatalf("%s not picked in 100 picks", addr)
	}
	fail("10.1.0.1:8080")
	if e.r.Unavailable(b) {
		t.Fatal("unavailable with one endpoint of two down")
	}
	fail("10.1.0.2:8080")
	if !e.r.Unavailable(b) {
		t.Fatal("available with both endpoints down")
	}
	reachable.Store(true)
	within(t, 5*time.Second, "available once a probe connects", func() bool { return !e.r.Unavailable(b) })
}

// TestCacheSurvivesServerGone: with destination stopped the cached set
// keeps serving; when it returns the fresh snapshot replaces the set.
func TestCacheSurvivesServerGone(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID), wa("10.1.0.2:8080", webID)))
	if got := e.picks(40); len(got) != 2 {
		t.Fatalf("picks = %v", got)
	}
	e.srv.Stop()
	within(t, 2*time.Second, "stream error counted", func() bool {
		return testutil.ToFloat64(e.r.streams.WithLabelValues("error")) > 0
	})
	if got := e.picks(40); len(got) != 2 {
		t.Errorf("with destination down: %v, want the cached two", got)
	}
	// Destination comes back on the same address with another set.
	ln, err := net.Listen("tcp", e.addr)
	if err != nil {
		t.Fatal(err)
	}
	e.serve(ln)
	e.srv.Set(svc.String(), add(wa("10.1.0.3:8080", webID)))
	within(t, 5*time.Second, "fresh snapshot replaces the cached set", func() bool {
		got := e.picks(4)
		return len(got) == 1 && got["10.1.0.3:8080"] == 4
	})
}

func TestUnreachableFallsBack(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.FirstTimeout = 300 * time.Millisecond })
	e.srv.Stop()
	t0 := time.Now()
	p, err := e.r.Pick(context.Background(), svc)
	if err != nil || !p.Fallback || p.Addr != svc {
		t.Fatalf("pick = %+v, %v; want fallback", p, err)
	}
	if el := time.Since(t0); el > time.Second {
		t.Errorf("fallback took %s", el)
	}
	if v := testutil.ToFloat64(e.r.lookups.WithLabelValues(ResultUnavailable)); v != 1 {
		t.Errorf("lookups{unavailable} = %v", v)
	}
}

func TestIdleSubscriptionDropped(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.IdleTimeout = 100 * time.Millisecond })
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID)))
	held, err := e.r.Pick(context.Background(), svc)
	if err != nil {
		t.Fatal(err)
	}
	<-e.srv.Opened
	// Sleep: three idle timeouts pass with the pick held; a janitor pass that drops nothing leaves no trace.
	time.Sleep(300 * time.Millisecond)
	select {
	case <-e.srv.Closed:
		t.Fatal("subscription dropped while a pick was in flight")
	default:
	}
	held.Done()
	select {
	case <-e.srv.Closed:
	case <-time.After(2 * time.Second):
		t.Fatal("idle subscription not dropped")
	}
	if v := testutil.ToFloat64(e.r.subsG); v != 0 {
		t.Errorf("destination_subscriptions = %v", v)
	}
	// A later pick subscribes again.
	p, err := e.r.Pick(context.Background(), svc)
	if err != nil || p.Addr.String() != "10.1.0.1:8080" {
		t.Errorf("re-subscribe: %+v %v", p, err)
	}
	p.Done()
}

func TestWrongDestinationIdentityRefused(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.FirstTimeout = 300 * time.Millisecond })
	// A client that expects another identity for destination gets nothing.
	cc, err := Dial(e.addr, e.ca.Source(proxyID), spiffe.New("cluster.local", "plexus-system", "someone-else"))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	st, err := destinationpb.NewDestinationClient(cc).Get(ctx, &destinationpb.GetDestination{Path: svc.String()})
	if err == nil {
		_, err = st.Recv()
	}
	if err == nil {
		t.Fatal("stream to a destination with the wrong identity succeeded")
	}
}

// The protocol hint reads the cache: it counts no lookup and leaves no
// request pending on any endpoint; one endpoint marked opaque is enough
// (a rollout that adds the marking), none marked is not opaque.
func TestOpaqueHintPicksNothing(t *testing.T) {
	e := newEnv(t, nil)
	opaque := func(w *destinationpb.WeightedAddr) *destinationpb.WeightedAddr {
		w.ProtocolHint = &destinationpb.ProtocolHint{Protocol: destinationpb.ProtocolHint_OPAQUE}
		return w
	}
	plain := netip.MustParseAddrPort("10.96.0.12:80")
	e.srv.Set(svc.String(), add(opaque(wa("10.1.0.1:8080", webID)), wa("10.1.0.2:8080", webID)))
	e.srv.Set(plain.String(), add(wa("10.1.0.3:8080", webID)))
	lookups := func() float64 { return testutil.ToFloat64(e.r.lookups.WithLabelValues(ResultEndpoints)) }
	if !e.r.Opaque(context.Background(), svc) {
		t.Errorf("Opaque(%s) = false with one of its two endpoints marked opaque", svc)
	}
	if e.r.Opaque(context.Background(), plain) {
		t.Errorf("Opaque(%s) = true with no endpoint marked", plain)
	}
	if n := lookups(); n != 0 {
		t.Errorf("the hints counted %v lookups, want 0 (they pick nothing)", n)
	}
	for _, set := range e.r.Endpoints() {
		for _, ep := range set.Endpoints {
			if ep.Pending != 0 {
				t.Errorf("%s has %d pending after the hints, want 0", ep.Addr, ep.Pending)
			}
		}
	}
	p, err := e.r.Pick(context.Background(), svc) // the control: a pick counts
	if err != nil {
		t.Fatal(err)
	}
	p.Done()
	if n := lookups(); n != 1 {
		t.Errorf("a pick after the hints: %v lookups, want 1", n)
	}
}
