package discovery

import (
	"context"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// inZone is wa with a zone label, as destination sends it.
func inZone(addr, zone string) *destinationpb.WeightedAddr {
	w := wa(addr, webID)
	w.MetricLabels["zone"] = zone
	return w
}

// zoneEnv serves two endpoints in zone-a (local) and two in zone-b.
func zoneEnv(t *testing.T) *env {
	e := newEnv(t, nil)
	e.srv.Set(svc.String(), add(
		inZone("10.1.0.1:8080", "zone-a"), inZone("10.1.0.2:8080", "zone-a"),
		inZone("10.2.0.1:8080", "zone-b"), inZone("10.2.0.2:8080", "zone-b")))
	return e
}

func local(addr string) bool { return strings.HasPrefix(addr, "10.1.") }

// answerIn records a first byte rtt after now, plus up to 10 % of jitter
// as real answers have: the sample the balancer sees, without waiting
// for it. (No time passes between a unit test's picks, so no estimate
// decays: without jitter the endpoint whose last sample was lowest would
// win every pair.)
func answerIn(p *Pick, rtt time.Duration) {
	p.firstByteAt(monoNow() + int64(rtt) + rand.Int64N(int64(rtt)/10))
}

// testRTT is every answer's round trip unless a test says otherwise.
const testRTT = 2 * time.Millisecond

// pickDone picks for backend, observes a first byte after testRTT, and
// returns the address.
func (e *env) pickDone(backend *routes.Backend) string {
	e.t.Helper()
	p, err := e.r.PickHTTP(context.Background(), svc, backend)
	if err != nil {
		e.t.Fatal(err)
	}
	answerIn(&p, testRTT)
	p.Report(balance.OutcomeSuccess)
	p.Done()
	return p.Addr.String()
}

// countLocal does n picks for backend and counts the local ones.
func (e *env) countLocal(backend *routes.Backend, n int) int {
	e.t.Helper()
	l := 0
	for range n {
		if local(e.pickDone(backend)) {
			l++
		}
	}
	return l
}

// TestZoneAwareStaysInZone: with zone-aware balancing on, requests at
// normal load stay in the proxy's zone, spread over its endpoints; the
// state and the metrics count them; off, they spread over both zones.
func TestZoneAwareStaysInZone(t *testing.T) {
	e := zoneEnv(t)
	off := &routes.Backend{}
	if l := e.countLocal(off, 400); l < 120 || l > 280 {
		t.Fatalf("zone-aware off: %d of 400 picks local, want about half", l)
	}
	on := &routes.Backend{LocalZone: "zone-a"}
	seen := map[string]int{}
	for range 1000 {
		seen[e.pickDone(on)]++
	}
	l := seen["10.1.0.1:8080"] + seen["10.1.0.2:8080"]
	if l < 950 {
		t.Errorf("zone-aware on: %d of 1000 picks local (%v), want at least 95 %%", l, seen)
	}
	// How the local picks spread over the local endpoints depends on
	// their estimates, which no passing time moves here:
	// TestZoneOneLocalConcurrentStaysLocal measures it on a simulated
	// clock.
	set := e.r.Endpoints()[0]
	if set.LocalZone != "zone-a" || set.LocalRequests != uint64(l) || set.RemoteRequests != uint64(1000-l) {
		t.Errorf("state: zone %q, %d local and %d remote; want zone-a, %d and %d", set.LocalZone, set.LocalRequests, set.RemoteRequests, l, 1000-l)
	}
	want := `
# HELP outbound_http_balancer_zone_requests_total Requests balanced zone-aware, by whether the endpoint was in the proxy's own zone (local) or not (remote).
# TYPE outbound_http_balancer_zone_requests_total counter
outbound_http_balancer_zone_requests_total{backend_name="web",backend_namespace="",backend_port="80",zone_locality="local"} ` + strconv.Itoa(l) + `
outbound_http_balancer_zone_requests_total{backend_name="web",backend_namespace="",backend_port="80",zone_locality="remote"} ` + strconv.Itoa(1000-l) + `
`
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(want), "outbound_http_balancer_zone_requests_total"); err != nil {
		t.Error(err)
	}
}

// TestZoneAwareSpillsWhenLocalUnresponsive: with both local endpoints
// marked unresponsive (their node lost), every request goes to the other
// zone, whatever the estimates.
func TestZoneAwareSpillsWhenLocalUnresponsive(t *testing.T) {
	e := zoneEnv(t)
	on := &routes.Backend{LocalZone: "zone-a"}
	e.countLocal(on, 100)
	e.markUnanswered(t, "10.1.0.1:8080")
	e.markUnanswered(t, "10.1.0.2:8080")
	if l := e.countLocal(on, 300); l != 0 {
		t.Errorf("%d of 300 picks local with both local endpoints unresponsive, want 0", l)
	}
}

// TestZoneAwareSpillsOnLoad: once spillPending requests are pending on
// the local endpoint picked, requests go to the remote ones; once they
// finish, traffic comes back.
func TestZoneAwareSpillsOnLoad(t *testing.T) {
	e := zoneEnv(t)
	on := &routes.Backend{LocalZone: "zone-a"}
	e.countLocal(&routes.Backend{}, 100) // every endpoint measured
	var held []Pick
	remote := 0
	for range 40 {
		p, err := e.r.PickHTTP(context.Background(), svc, on)
		if err != nil {
			t.Fatal(err)
		}
		if local(p.Addr.String()) {
			held = append(held, p) // a local request that does not end
			continue
		}
		remote++
		answerIn(&p, testRTT)
		p.Done()
	}
	if remote == 0 || len(held) > 10 {
		t.Fatalf("with every local request held open, %d of 40 went remote and %d stayed local; want the load to spill", remote, len(held))
	}
	for _, p := range held {
		answerIn(&p, testRTT)
		p.Done()
	}
	if l := e.countLocal(on, 100); l < 90 {
		t.Errorf("after the local requests finished, %d of 100 picks were local; want traffic back in the zone", l)
	}
}

// TestZoneAwareSpillsOnLatency: local endpoints that answer slowly lose
// their traffic to the other zone at once: one slow answer each (the
// first answer is the typical RTT; TestZoneSpillsOnLatencyAndReturns
// follows a change in a measured one).
func TestZoneAwareSpillsOnLatency(t *testing.T) {
	e := zoneEnv(t)
	e.countLocal(&routes.Backend{}, 100) // every endpoint measured
	on := &routes.Backend{LocalZone: "zone-a"}
	slow := 0
	for range 10 {
		p, err := e.r.PickHTTP(context.Background(), svc, on)
		if err != nil {
			t.Fatal(err)
		}
		rtt := testRTT
		if local(p.Addr.String()) {
			slow++
			rtt = 40 * testRTT
		}
		answerIn(&p, rtt)
		p.Done()
	}
	if slow > 2 {
		t.Errorf("%d slow local answers before traffic left the zone; want at most one per local endpoint", slow)
	}
	if l := e.countLocal(on, 100); l > 0 {
		t.Errorf("with both local endpoints typically at 80 ms against 2 ms, %d of 100 picks stayed local", l)
	}
}

// TestZoneAwareSpillsOnFailures: with failure accrual, ejected local
// endpoints are unavailable and requests go to the other zone; with no
// local endpoint at all, every request does.
func TestZoneAwareSpillsOnFailures(t *testing.T) {
	e := zoneEnv(t)
	cfg := &accrual.Config{ConsecutiveFailures: 2, MinPenalty: time.Minute, MaxPenalty: time.Minute, MinHealthyPercent: 0}
	on := &routes.Backend{LocalZone: "zone-a", Accrual: cfg}
	failing := map[string]bool{"10.1.0.1:8080": true, "10.1.0.2:8080": true}
	for range 20 {
		e.pickReport(on, failing)
	}
	for _, ep := range e.r.Endpoints()[0].Endpoints {
		if want := map[bool]string{true: "ejected", false: "ready"}[local(ep.Addr)]; ep.State != want {
			t.Fatalf("%s is %s, want %s", ep.Addr, ep.State, want)
		}
	}
	for range 50 {
		if a := e.pickReport(on, failing); local(a) {
			t.Fatalf("picked ejected local endpoint %s", a)
		}
	}

	remoteOnly := newEnv(t, nil)
	remoteOnly.srv.Set(svc.String(), add(inZone("10.2.0.1:8080", "zone-b")))
	if got := remoteOnly.pickDone(&routes.Backend{LocalZone: "zone-a"}); got != "10.2.0.1:8080" {
		t.Errorf("with no local endpoint: picked %s", got)
	}
}

// TestRemoteBestCountsFirstAnswerAtOnce: the latency rule's remote figure
// is taken as soon as one remote endpoint has answered, even when the
// picks that follow draw one that has not (rt 0) and the last scan, which
// found nothing, is under remoteRescanEvery old. (It used to wait for the
// next scan: the zone stayed local through slow answers for up to a
// second, and TestZoneAwareSpillsOnLatency failed one run in nine.)
func TestRemoteBestCountsFirstAnswerAtOnce(t *testing.T) {
	measured, unmeasured := &endpoint{}, &endpoint{}
	z := &zoneSplit{remoteEps: []*endpoint{measured, unmeasured}}
	now := int64(10 * time.Second)
	if got := z.remoteBest(0, now); got != 0 {
		t.Fatalf("remoteBest with no remote answer = %v, want 0", got)
	}
	measured.typical.Observe(testRTT)
	if got := z.remoteBest(unmeasured.typical.Get(), now+int64(time.Millisecond)); got != float64(testRTT) {
		t.Errorf("remoteBest drawing the unmeasured endpoint after the other answered = %v, want %v", got, float64(testRTT))
	}
}
