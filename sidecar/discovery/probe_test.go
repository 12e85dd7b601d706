package discovery

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// markUnanswered places a request on addr's endpoint that started 2 s ago
// and ends unanswered now, as a request whose client gave up on a dead
// node does, and starts the probe as Pick.Done would.
func (e *env) markUnanswered(t *testing.T, addr string) {
	t.Helper()
	e.r.mu.Lock()
	var s *sub
	for _, x := range e.r.subs {
		s = x
	}
	e.r.mu.Unlock()
	s.mu.Lock()
	var ep *endpoint
	for _, x := range s.eps {
		if x.Addr.String() == addr {
			ep = x
		}
	}
	s.mu.Unlock()
	if ep == nil {
		t.Fatalf("no endpoint %s", addr)
	}
	// A second ahead: after the first bytes answerIn dated a few
	// milliseconds ahead, so that none came since this request started.
	start := monoNow() + int64(time.Second)
	h := ep.lb.Start(start)
	if !h.Unanswered(start + int64(2*time.Second)) {
		t.Fatalf("a request unanswered for 2 s did not mark %s down", addr)
	}
	h.Done()
	e.r.probeDown(s, ep, ep.Addr, "test")
}

// An endpoint that left a request unanswered is passed over by every pick
// until a probe connects to it; the probe is retried while it fails, and
// /endpoints and the metrics show the endpoint unresponsive meanwhile.
func TestUnresponsiveEndpointIsProbed(t *testing.T) {
	var reachable atomic.Bool
	probed := make(chan netip.AddrPort, 16)
	e := newEnv(t, func(o *Options) {
		o.Probe = func(ctx context.Context, addr netip.AddrPort) error {
			select {
			case probed <- addr:
			default:
			}
			if reachable.Load() {
				return nil
			}
			<-ctx.Done() // a dead node: the connection attempt times out
			return ctx.Err()
		}
	})
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID), wa("10.1.0.2:8080", webID), wa("10.1.0.3:8080", webID)))
	e.picks(30)
	const dead = "10.1.0.1:8080"
	e.markUnanswered(t, dead)

	select {
	case a := <-probed:
		if a.String() != dead {
			t.Fatalf("probed %s, want %s", a, dead)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no probe of the unresponsive endpoint within 5s")
	}
	if n := e.picks(300)[dead]; n != 0 {
		t.Errorf("the unresponsive endpoint took %d of 300 picks, want 0", n)
	}
	sets := e.r.Endpoints()
	if len(sets) != 1 || sets[0].Unresponsive != 1 {
		t.Fatalf("Endpoints() = %+v, want one set with 1 endpoint marked unresponsive", sets)
	}
	for _, ep := range sets[0].Endpoints {
		if want := map[bool]string{true: StateUnresponsive, false: "ready"}[ep.Addr == dead]; ep.State != want {
			t.Errorf("%s: state %q, want %q", ep.Addr, ep.State, want)
		}
	}
	want := `
# HELP outbound_http_balancer_unresponsive_total Times an endpoint was marked unresponsive: a request waited on it past its silence limit and ended with no response byte from it meanwhile, or a connection to it could not be opened; picks pass it over until it answers or accepts a probe connection.
# TYPE outbound_http_balancer_unresponsive_total counter
outbound_http_balancer_unresponsive_total{backend_name="web",backend_namespace="",backend_port="80"} 1
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "outbound_http_balancer_unresponsive_total"); err != nil {
		t.Error(err)
	}

	// It comes back: the next probe connects and picks use it again.
	reachable.Store(true)
	within(t, 5*time.Second, dead+" ready again", func() bool {
		for _, ep := range e.r.Endpoints()[0].Endpoints {
			if ep.Addr == dead {
				return ep.State == "ready"
			}
		}
		return false
	})
	if n := e.picks(300)[dead]; n == 0 {
		t.Error("the endpoint took no pick after a probe reached it")
	}
}

// The default probe is a TCP connection: it succeeds against a listener
// and fails, naming the address, against a closed port.
func TestDialProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.MustParseAddrPort(ln.Addr().String())
	ctx, cancel := context.WithTimeout(context.Background(), ProbeTimeout)
	defer cancel()
	if err := dialProbe(ctx, addr); err != nil {
		t.Errorf("probe of a listener: %v", err)
	}
	ln.Close()
	err = dialProbe(ctx, addr)
	if err == nil || !strings.Contains(err.Error(), addr.String()) {
		t.Errorf("probe of a closed port: %v, want an error naming %s", err, addr)
	}
	var opErr *net.OpError
	if !errors.As(err, &opErr) {
		t.Errorf("probe error %T, want a *net.OpError", err)
	}
}

// A probe of a dead endpoint ends when the resolver closes: Close does not
// wait out its backoff.
func TestCloseEndsProbes(t *testing.T) {
	e := newEnv(t, nil) // its probe never connects
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID), wa("10.1.0.2:8080", webID), wa("10.1.0.3:8080", webID)))
	e.picks(30)
	e.markUnanswered(t, "10.1.0.1:8080")
	t0 := time.Now()
	e.r.Close()
	if d := time.Since(t0); d > ProbeTimeout+500*time.Millisecond {
		t.Errorf("Close took %v with a probe running; want it to end the probe at once", d)
	}
}

// A connection that could not be opened (an opaque connection's dial
// refused or timed out) marks its endpoint down at once: opaque picks,
// least-loaded, pass it over as HTTP picks do, and it is probed until it
// accepts a connection.
func TestConnectFailedPassesOver(t *testing.T) {
	var reachable atomic.Bool
	e := newEnv(t, func(o *Options) {
		o.Probe = probeWhile(&reachable)
	})
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID), wa("10.1.0.2:8080", webID), wa("10.1.0.3:8080", webID)))
	conns := func(n int, failed string) map[string]int {
		got := map[string]int{}
		for range n {
			p, err := e.r.PickConn(context.Background(), svc)
			if err != nil {
				t.Fatal(err)
			}
			got[p.Addr.String()]++
			if p.Addr.String() == failed {
				p.ConnectFailed()
			}
			p.Done()
		}
		return got
	}
	const dead = "10.1.0.1:8080"
	if got := conns(30, ""); got[dead] == 0 {
		t.Fatalf("before: %v, want every endpoint picked", got)
	}
	conns(30, dead) // the first pick of dead marks it
	if got := conns(300, ""); got[dead] != 0 {
		t.Errorf("after a failed connection: %d of 300 opaque picks went to %s, want 0", got[dead], dead)
	}
	if n := e.picks(300)[dead]; n != 0 {
		t.Errorf("after a failed connection: %d of 300 HTTP picks went to %s, want 0", n, dead)
	}
	reachable.Store(true)
	within(t, 5*time.Second, dead+" picked again", func() bool { return conns(30, "")[dead] > 0 })
}

// probeWhile is an Options.Probe that reaches any endpoint while
// reachable holds, and otherwise waits out its timeout (a silent address).
func probeWhile(reachable *atomic.Bool) func(ctx context.Context, addr netip.AddrPort) error {
	return func(ctx context.Context, _ netip.AddrPort) error {
		if reachable.Load() {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}
}
