package discovery

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/fakedestination"
)

// A known service without endpoints makes picks wait: those waiting
// during a gap get the endpoint that ends it.
func TestPicksWaitThroughAGap(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID)))
	e.picks(1)
	e.srv.Push(svc.String(), remove(wa("10.1.0.1:8080", webID)))
	within(t, time.Second, "the set empties", func() bool {
		s := e.r.subscription(subKey{addr: svc})
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.pickable) == 0
	})
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	start := time.Now()
	for range 5 {
		wg.Go(func() {
			p, err := e.r.Pick(context.Background(), svc)
			if err == nil && p.Addr.String() != "10.1.0.2:8080" {
				err = errors.New("picked " + p.Addr.String())
			}
			p.Done()
			errs <- err
		})
	}
	// Sleep: the gap is the scenario, shorter than the fail-fast timeout (see the 250ms check).
	time.Sleep(300 * time.Millisecond)
	e.srv.Push(svc.String(), add(wa("10.1.0.2:8080", webID)))
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("a pick waiting through the gap: %v", err)
		}
	}
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Errorf("picks returned after %s: they did not wait for the gap to end", el)
	}
}

// A pick that waits the fail-fast timeout in vain fails, and so do the
// next ones, at once, until an endpoint appears.
func TestFailFast(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.FailFastTimeout = 200 * time.Millisecond })
	e.srv.Set(svc.String(), fakedestination.NoEndpoints(true))
	t0 := time.Now()
	if _, err := e.r.Pick(context.Background(), svc); !errors.Is(err, ErrNoEndpoints) {
		t.Fatalf("err = %v, want ErrNoEndpoints", err)
	}
	if el := time.Since(t0); el < 200*time.Millisecond || el > 2*time.Second {
		t.Errorf("the first pick failed after %s, want the fail-fast timeout (200ms)", el)
	}
	t0 = time.Now()
	if _, err := e.r.Pick(context.Background(), svc); !errors.Is(err, ErrNoEndpoints) {
		t.Fatalf("in fail-fast: err = %v, want ErrNoEndpoints", err)
	}
	if el := time.Since(t0); el > 100*time.Millisecond {
		t.Errorf("in fail-fast a pick took %s, want an answer at once", el)
	}
	for reason, want := range map[string]float64{FailFastWaited: 1, FailFastAtOnce: 1} {
		if got := testutil.ToFloat64(e.r.failFast.WithLabelValues(reason)); got != want {
			t.Errorf("outbound_balancer_fail_fast_total{reason=%q} = %v, want %v", reason, got, want)
		}
	}
	e.srv.Push(svc.String(), add(wa("10.1.0.3:8080", webID)))
	within(t, time.Second, "fail-fast ends with an endpoint", func() bool {
		p, err := e.r.Pick(context.Background(), svc)
		p.Done()
		return err == nil && p.Addr.String() == "10.1.0.3:8080"
	})
}

// At most MaxWaiting picks wait; the next fails at once with ErrQueueFull.
func TestQueueBounded(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.Set(svc.String(), fakedestination.NoEndpoints(true))
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for range MaxWaiting {
		wg.Go(func() { e.r.Pick(ctx, svc) })
	}
	defer func() { cancel(); wg.Wait() }()
	s := e.r.subscription(subKey{addr: svc})
	within(t, 2*time.Second, "MaxWaiting picks wait", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.waiting == MaxWaiting
	})
	t0 := time.Now()
	if _, err := e.r.Pick(context.Background(), svc); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("pick %d: err = %v, want ErrQueueFull", MaxWaiting+1, err)
	}
	if el := time.Since(t0); el > 100*time.Millisecond {
		t.Errorf("the refused pick took %s, want at once", el)
	}
	if got := testutil.ToFloat64(e.r.failFast.WithLabelValues(FailFastQueueFull)); got != 1 {
		t.Errorf("queue-full count = %v, want 1", got)
	}
}

// Terminating endpoints take no new requests while any endpoint is
// ready, and take them when none is (as kube-proxy).
func TestTerminatingEndpoints(t *testing.T) {
	e := newEnv(t, nil)
	term := wa("10.1.0.2:8080", webID)
	term.Terminating = true
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID), term))
	if got := e.picks(50); got["10.1.0.2:8080"] != 0 || got["10.1.0.1:8080"] != 50 {
		t.Errorf("with a ready endpoint: picks = %v, want none to the terminating one", got)
	}
	e.srv.Push(svc.String(), remove(wa("10.1.0.1:8080", webID)))
	within(t, time.Second, "the terminating endpoint serves when none is ready", func() bool {
		got := e.picks(5)
		return got["10.1.0.2:8080"] == 5
	})
}

// Addresses that leave the set are reported (the proxy closes its idle
// connections to them).
func TestEndpointsRemovedReported(t *testing.T) {
	removed := make(chan netip.AddrPort, 4)
	e := newEnv(t, func(o *Options) {
		o.EndpointsRemoved = func(as []netip.AddrPort) {
			for _, a := range as {
				removed <- a
			}
		}
	})
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID), wa("10.1.0.2:8080", spiffe.ID{})))
	e.picks(1)
	e.srv.Push(svc.String(), remove(wa("10.1.0.2:8080", spiffe.ID{})))
	select {
	case a := <-removed:
		if a.String() != "10.1.0.2:8080" {
			t.Errorf("reported %s removed, want 10.1.0.2:8080", a)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("the removal was not reported")
	}
	select {
	case a := <-removed:
		t.Errorf("also reported %s", a)
	case <-time.After(50 * time.Millisecond):
	}
}
