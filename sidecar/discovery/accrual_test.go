package discovery

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// pickReport picks for backend and reports failure when the endpoint is
// in failing, success otherwise; it returns the address picked.
func (e *env) pickReport(backend *routes.Backend, failing map[string]bool) string {
	e.t.Helper()
	p, err := e.r.PickHTTP(context.Background(), svc, backend)
	if err != nil {
		e.t.Fatal(err)
	}
	a := p.Addr.String()
	if failing[a] {
		p.Report(balance.OutcomeFailure)
	} else {
		p.Report(balance.OutcomeSuccess)
	}
	p.Done()
	return a
}

// Failure accrual through the pick path: a failing endpoint is ejected
// after N failures in a row, gets exactly one probe once its penalty is
// over, and is back after a successful one; the floor keeps one of two
// failing endpoints in.
func TestAccrualThroughPicks(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID), wa("10.1.0.2:8080", webID), wa("10.1.0.3:8080", webID)))
	cfg := &accrual.Config{ConsecutiveFailures: 3, MinPenalty: 300 * time.Millisecond, MaxPenalty: time.Second, MinHealthyPercent: 50}
	backend := &routes.Backend{Accrual: cfg}
	bad := map[string]bool{"10.1.0.1:8080": true}

	picked := map[string]int{}
	for range 200 {
		picked[e.pickReport(backend, bad)]++
	}
	if n := picked["10.1.0.1:8080"]; n != 3 {
		t.Errorf("the failing endpoint took %d of 200 picks within its penalty, want exactly 3 (the failures that ejected it)", n)
	}
	e.wantEjected(t, "10.1.0.1:8080")

	e.waitProbeDue(t, "10.1.0.1:8080") // the penalty is over: one probe is due
	var probes int
	var probe Pick
	for range 50 {
		p, err := e.r.PickHTTP(context.Background(), svc, backend)
		if err != nil {
			t.Fatal(err)
		}
		if p.Addr.String() == "10.1.0.1:8080" {
			probes++
			probe = p // held: its outcome is still awaited
			continue
		}
		p.Report(balance.OutcomeSuccess)
		p.Done()
	}
	if probes != 1 {
		t.Fatalf("after the penalty the endpoint got %d of 50 picks with its probe in flight, want exactly 1", probes)
	}
	probe.Report(balance.OutcomeSuccess) // fixed
	probe.Done()
	picked = map[string]int{}
	for range 300 {
		picked[e.pickReport(backend, nil)]++
	}
	if n := picked["10.1.0.1:8080"]; n < 30 {
		t.Errorf("after a successful probe the endpoint took %d of 300 picks, want its share back", n)
	}

	// Without accrual (no config on the backend) nothing is ejected.
	picked = map[string]int{}
	for range 300 {
		picked[e.pickReport(&routes.Backend{}, bad)]++
	}
	if n := picked["10.1.0.1:8080"]; n < 30 {
		t.Errorf("with accrual off the failing endpoint took %d of 300 picks, want about a third", n)
	}
}

// An endpoint restored by a successful probe rejoins as a newcomer: a slow
// answer to the probe (50 ms, against peers that answer in microseconds)
// is not the peak that would keep it out of every pair until it decays;
// its estimate restarts from the best of the others', and it costs
// nothing until its next request is placed.
func TestRestoredEndpointRejoinsAsNewcomer(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID), wa("10.1.0.2:8080", webID), wa("10.1.0.3:8080", webID)))
	backend := &routes.Backend{Accrual: &accrual.Config{ConsecutiveFailures: 3, MinPenalty: 200 * time.Millisecond, MaxPenalty: time.Second, MinHealthyPercent: 50}}
	const fixed = "10.1.0.1:8080"
	for range 100 {
		e.pickReport(backend, map[string]bool{fixed: true}) // no samples: picks at random until it is out
	}
	e.wantEjected(t, fixed)
	e.waitProbeDue(t, fixed)
	for {
		p, err := e.r.PickHTTP(context.Background(), svc, backend)
		if err != nil {
			t.Fatal(err)
		}
		if p.Addr.String() == fixed {
			time.Sleep(50 * time.Millisecond) // Sleep: the probe's answer is slow
		}
		p.FirstByte()
		p.Report(balance.OutcomeSuccess)
		p.Done()
		if p.Addr.String() == fixed {
			break
		}
	}
	var restored, others []float64
	for _, ep := range e.r.Endpoints()[0].Endpoints {
		if ep.Addr == fixed {
			restored = append(restored, ep.EWMAms)
			if ep.State != "ready" {
				t.Errorf("%s after its probe succeeded: state %q, want ready", fixed, ep.State)
			}
		} else {
			others = append(others, ep.EWMAms)
		}
	}
	if len(restored) != 1 || len(others) != 2 || restored[0] > max(others[0], others[1]) {
		t.Errorf("after a 50 ms probe answer the restored endpoint's estimate is %v ms, the others' %v; want at most theirs (it rejoins as a newcomer)", restored, others)
	}
}

func TestAccrualFloor(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID), wa("10.1.0.2:8080", webID)))
	backend := &routes.Backend{Accrual: &accrual.Config{ConsecutiveFailures: 2, MinPenalty: time.Minute, MaxPenalty: time.Minute, MinHealthyPercent: 50}}
	all := map[string]bool{"10.1.0.1:8080": true, "10.1.0.2:8080": true}
	picked := map[string]int{}
	for range 100 {
		picked[e.pickReport(backend, all)]++ // never waits: the floor keeps one in
	}
	if len(picked) != 2 {
		t.Errorf("picks = %v, want both used (one ejected, after taking its failures)", picked)
	}
	first := map[string]int{}
	for range 50 {
		first[e.pickReport(backend, all)]++
	}
	if len(first) != 1 {
		t.Errorf("with both failing, later picks = %v, want all on the one the floor keeps in", first)
	}
}

// wantEjected checks the diagnostics of an ejection: /endpoints' state
// and the balancer metrics.
// waitProbeDue waits until addr's penalty is over and its probe is due.
func (e *env) waitProbeDue(t *testing.T, addr string) {
	t.Helper()
	within(t, 3*time.Second, addr+"'s probe due", func() bool {
		for _, set := range e.r.Endpoints() {
			for _, ep := range set.Endpoints {
				if ep.Addr == addr {
					return ep.State == balance.StateProbing.String()
				}
			}
		}
		return false
	})
}

func (e *env) wantEjected(t *testing.T, addr string) {
	t.Helper()
	sets := e.r.Endpoints()
	if len(sets) != 1 || !sets[0].FailureAccrual || sets[0].Ejections != 1 {
		t.Fatalf("Endpoints() = %+v, want one set with accrual and 1 ejection", sets)
	}
	for _, ep := range sets[0].Endpoints {
		switch {
		case ep.Addr == addr && (ep.State != "ejected" || ep.PenaltyLeftMs <= 0):
			t.Errorf("%s: state %q, penalty left %vms; want ejected with a penalty running", addr, ep.State, ep.PenaltyLeftMs)
		case ep.Addr != addr && ep.State != "ready":
			t.Errorf("%s: state %q, want ready", ep.Addr, ep.State)
		}
	}
	want := `
# HELP outbound_http_balancer_ejections_total Endpoints ejected by failure accrual, re-ejections after a failed probe included (since accrual was configured for the backend).
# TYPE outbound_http_balancer_ejections_total counter
outbound_http_balancer_ejections_total{backend_name="web",backend_namespace="",backend_port="80"} 1
# HELP outbound_http_balancer_endpoints Endpoints of each backend by state: ready takes requests; pending does not (unresponsive, ejected by failure accrual, its probe in flight, or terminating).
# TYPE outbound_http_balancer_endpoints gauge
outbound_http_balancer_endpoints{backend_name="web",backend_namespace="",backend_port="80",endpoint_state="pending"} 1
outbound_http_balancer_endpoints{backend_name="web",backend_namespace="",backend_port="80",endpoint_state="ready"} 2
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "outbound_http_balancer_endpoints", "outbound_http_balancer_ejections_total"); err != nil {
		t.Error(err)
	}
}
