package discovery

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/balance"
	"github.com/plexus-mesh/plexus/testsupport/fakedestination"
)

// Picks waiting while the only endpoint's probe is in flight are woken
// when the probe succeeds (they used to wait out the fail-fast timeout
// and fail).
func TestProbeSuccessWakesWaiters(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.FailFastTimeout = time.Second })
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID)))
	backend := &routes.Backend{Accrual: &accrual.Config{ConsecutiveFailures: 1, MinPenalty: 100 * time.Millisecond, MaxPenalty: 100 * time.Millisecond, MinHealthyPercent: 0}}
	p, err := e.r.PickHTTP(context.Background(), svc, backend)
	if err != nil {
		t.Fatal(err)
	}
	p.Report(balance.OutcomeFailure)
	p.Done()
	e.waitProbeDue(t, "10.1.0.1:8080")
	probe, err := e.r.PickHTTP(context.Background(), svc, backend) // claims the probe
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	t0 := time.Now()
	for range 3 {
		wg.Go(func() {
			p, err := e.r.PickHTTP(context.Background(), svc, backend)
			if err == nil {
				p.Report(balance.OutcomeSuccess)
				p.Done()
			}
			errs <- err
		})
	}
	s := e.r.subscription(subKey{addr: svc})
	within(t, time.Second, "three picks waiting on the probe", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.waiting == 3
	})
	restored := time.Since(t0)
	probe.Report(balance.OutcomeSuccess) // restored
	probe.Done()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("waiter failed after %s although the endpoint was restored at %s: %v", time.Since(t0), restored, err)
		}
	}
	s.mu.Lock()
	ff := s.failFast
	s.mu.Unlock()
	t.Logf("failFast after restore = %v", ff)
	// the next ejection (100ms penalty, fail-fast timeout 1s).
	p, _ = e.r.PickHTTP(context.Background(), svc, backend)
	p.Report(balance.OutcomeFailure)
	p.Done()
	t1 := time.Now()
	if _, err := e.r.PickHTTP(context.Background(), svc, backend); err != nil {
		t.Errorf("B: a pick during a 100ms ejection failed after %s (its probe was due well within the 1s wait): %v", time.Since(t1), err)
	}
}

// Fail-fast set while every endpoint was ejected ends when a probe
// restores one: the next all-ejected episode waits for its probe (due in
// 100 ms) instead of failing at once.
func TestFailFastEndsWithAProbe(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.FailFastTimeout = 200 * time.Millisecond })
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID)))
	backend := &routes.Backend{Accrual: &accrual.Config{ConsecutiveFailures: 1, MinPenalty: 400 * time.Millisecond, MaxPenalty: 400 * time.Millisecond, MinHealthyPercent: 0}}
	p, _ := e.r.PickHTTP(context.Background(), svc, backend)
	p.Report(balance.OutcomeFailure)
	p.Done()
	if _, err := e.r.PickHTTP(context.Background(), svc, backend); err == nil {
		t.Fatal("want a fail-fast timeout while ejected 400ms > 200ms")
	}
	e.waitProbeDue(t, "10.1.0.1:8080")
	p, err := e.r.PickHTTP(context.Background(), svc, backend) // probe
	if err != nil {
		t.Fatal(err)
	}
	p.Report(balance.OutcomeSuccess)
	p.Done()
	for range 20 { // the endpoint serves
		p, err := e.r.PickHTTP(context.Background(), svc, backend)
		if err != nil {
			t.Fatal(err)
		}
		p.Report(balance.OutcomeSuccess)
		p.Done()
	}
	// Now a short ejection (penalty 100ms < 200ms fail-fast timeout).
	backend.Accrual.MinPenalty, backend.Accrual.MaxPenalty = 100*time.Millisecond, 100*time.Millisecond // new config: fresh breakers
	p, _ = e.r.PickHTTP(context.Background(), svc, backend)
	p.Report(balance.OutcomeFailure)
	p.Done()
	t0 := time.Now()
	_, err = e.r.PickHTTP(context.Background(), svc, backend)
	t.Logf("pick during 100ms ejection: err=%v after %s", err, time.Since(t0))
	if err != nil {
		t.Errorf("a pick during a 100ms ejection failed after %s (the probe was due within the 200ms wait): %v", time.Since(t0), err)
	}
}

// The janitor keeps a subscription whose picks are waiting: the endpoint
// that ends the gap must reach them.
func TestJanitorKeepsWaitingSub(t *testing.T) {
	e := newEnv(t, func(o *Options) { o.IdleTimeout = 50 * time.Millisecond; o.FailFastTimeout = time.Second })
	e.srv.Set(svc.String(), fakedestination.NoEndpoints(true))
	done := make(chan error, 1)
	t0 := time.Now()
	go func() {
		p, err := e.r.Pick(context.Background(), svc)
		p.Done()
		done <- err
	}()
	// Sleep: the gap outlasts the 50ms idle timeout, for the janitor's chances; no pass leaves a trace.
	time.Sleep(300 * time.Millisecond)
	e.srv.Push(svc.String(), add(wa("10.1.0.2:8080", webID)))
	if err := <-done; err != nil {
		t.Errorf("pick waiting through a 300ms gap failed after %s: %v", time.Since(t0), err)
	}
}
