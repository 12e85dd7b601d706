package balance

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
)

// answering returns an endpoint whose estimate is rtt, answered at t0.
func answering(rtt time.Duration) *Endpoint {
	e := NewEndpoint(Config{DefaultRTT: rtt}, 0, t0-sec)
	sample(e, t0-int64(rtt), t0)
	return e
}

func TestSilencePastTheFloorMakesUnresponsive(t *testing.T) {
	e := answering(time.Millisecond)
	h := e.Start(t0)
	// One request waiting: quiet (its silence is its cost), not
	// unresponsive — one request may rightly wait long.
	if e.Unresponsive(t0+150*ms) || !e.quiet(t0+150*ms) {
		t.Errorf("one request 150 ms into its wait: unresponsive %v, quiet %v; want quiet only", e.Unresponsive(t0+150*ms), e.quiet(t0+150*ms))
	}
	h2 := e.Start(t0 + 10*ms)
	if e.Unresponsive(t0 + 90*ms) {
		t.Errorf("unresponsive 90 ms into a wait: the floor is %v", SilenceFloor)
	}
	if !e.Unresponsive(t0 + 110*ms) {
		t.Errorf("responsive with two requests 110 ms into a wait and an estimate of 1 ms: want unresponsive past the %v floor", SilenceFloor)
	}
	// The silence is the estimate in the cost: 150 ms × (2 pending + 1).
	near(t, "cost 150 ms into the wait (ms)", e.Cost(t0+150*ms)/1e6, 450)
	h.Observe(t0 + 200*ms)
	if e.Unresponsive(t0+200*ms) || e.Silence(t0+200*ms) != 0 {
		t.Errorf("after an answer: unresponsive %v, silence %v; want responsive, 0", e.Unresponsive(t0+200*ms), e.Silence(t0+200*ms))
	}
	h.Done()
	h2.Done()
}

func TestSilenceLimitScalesWithTheEstimate(t *testing.T) {
	e := answering(50 * time.Millisecond) // limit 10 × 50 ms
	e.Start(t0)
	e.Start(t0)
	if e.Unresponsive(t0 + 450*ms) {
		t.Error("unresponsive 450 ms into a wait with an estimate of 50 ms: want the limit at 500 ms")
	}
	if !e.Unresponsive(t0 + 550*ms) {
		t.Error("responsive 550 ms into a wait with an estimate of 50 ms")
	}
}

func TestAnswersKeepABusyEndpointResponsive(t *testing.T) {
	// Requests always wait on it, but answers keep coming: not silent.
	e := answering(time.Millisecond)
	long := e.Start(t0) // a long request, waiting throughout
	for at := t0; at < t0+sec; at += 20 * ms {
		h := e.Start(at)
		h.Observe(at + 5*ms)
		h.Done()
		if e.Unresponsive(at + 10*ms) {
			t.Fatalf("unresponsive at +%v with an answer 5 ms before", time.Duration(at+10*ms-t0))
		}
	}
	long.Done()
}

func TestUnansweredPastTheLimitMarksDown(t *testing.T) {
	e := answering(time.Millisecond)
	h := e.Start(t0)
	if !h.Waiting() {
		t.Fatal("a started request is not Waiting")
	}
	if !h.Unanswered(t0 + 2*sec) {
		t.Fatal("a request unanswered for 2 s did not mark its endpoint down")
	}
	h.Done()
	if !e.Down() || !e.Unresponsive(t0+2*sec) {
		t.Errorf("after an unanswered 2 s wait: down %v, unresponsive %v; want both", e.Down(), e.Unresponsive(t0+2*sec))
	}
	// The wait measured the client's patience: no sample.
	near(t, "estimate after the unanswered wait (ms)", msOf(e.Estimate(t0+2*sec)), msOf(answering(time.Millisecond).Estimate(t0+2*sec)))
	// A second request that gives up does not mark it again: one probe.
	h2 := e.Start(t0 + 3*sec)
	if h2.Unanswered(t0 + 5*sec) {
		t.Error("a second unanswered wait marked an endpoint already down")
	}
	h2.Done()
	// An answer, even late, clears it.
	h3 := e.Start(t0 + 6*sec)
	h3.Observe(t0 + 6*sec + ms)
	h3.Done()
	if e.Down() {
		t.Error("still down after an answer")
	}
	h4 := e.Start(t0 + 7*sec)
	h4.Unanswered(t0 + 9*sec)
	h4.Done()
	e.MarkResponsive(3*time.Millisecond, t0+9*sec)
	if e.Down() || e.Unresponsive(t0+9*sec) {
		t.Error("still unresponsive after MarkResponsive")
	}
	near(t, "estimate after MarkResponsive (ms)", msOf(e.Estimate(t0+9*sec)), 3)
}

// A slow request given up on an endpoint that answered others meanwhile
// (a route timeout on a busy, healthy endpoint) does not mark it.
func TestUnansweredOnAnAnsweringEndpoint(t *testing.T) {
	e := answering(time.Millisecond)
	slow := e.Start(t0)
	other := e.Start(t0 + 100*ms)
	other.Observe(t0 + 101*ms)
	other.Done()
	if slow.Unanswered(t0 + 2*sec) {
		t.Error("a request given up after 2 s marked down an endpoint that answered another one meanwhile")
	}
	slow.Done()
	if e.Down() {
		t.Error("down")
	}
}

func TestUnansweredWithinTheLimitChangesNothing(t *testing.T) {
	e := answering(time.Millisecond)
	h := e.Start(t0)
	if h.Unanswered(t0 + 50*ms) { // its client gave up after 50 ms
		t.Error("a request given up after 50 ms marked its endpoint down")
	}
	h.Done()
	near(t, "estimate (ms)", msOf(e.Estimate(t0+50*ms)), msOf(answering(time.Millisecond).Estimate(t0+50*ms)))
	// Answered requests and connections are never unanswered.
	a := e.Start(t0 + sec)
	a.Observe(t0 + sec + ms)
	if a.Waiting() || a.Unanswered(t0+5*sec) {
		t.Error("an answered request counts as unanswered")
	}
	a.Done()
	c := e.StartConn(t0 + sec)
	if c.Waiting() || c.Unanswered(t0+60*sec) || e.Unresponsive(t0+60*sec) || e.Silence(t0+60*sec) != 0 {
		t.Error("an opaque connection made its endpoint silent or unanswered")
	}
	c.Done()
}

// deadAndAlive returns four endpoints answering in 1 ms, the first two of
// which have a request waiting unanswered since t0.
func deadAndAlive() []*Endpoint {
	eps := []*Endpoint{answering(time.Millisecond), answering(time.Millisecond), answering(time.Millisecond), answering(time.Millisecond)}
	for _, e := range eps[:2] {
		e.Start(t0)
		e.Start(t0)
	}
	return eps
}

// A pair of two unresponsive endpoints, one marked down: the one not
// down wins, whatever the costs (the one down has nothing pending).
func TestP2CPrefersUnresponsiveToDown(t *testing.T) {
	eps := []*Endpoint{answering(time.Millisecond), answering(time.Millisecond)}
	h := eps[0].Start(t0)
	h.Unanswered(t0 + sec)
	h.Done()
	eps[1].Start(t0 + sec)
	eps[1].Start(t0 + sec)
	now := t0 + 2*sec
	if !eps[0].Down() || !eps[1].Unresponsive(now) || eps[1].Down() {
		t.Fatal("setup: want 0 down, 1 unresponsive")
	}
	for range 100 {
		if i := IndexP2C(eps, now, rand.Uint64()); i != 1 {
			t.Fatalf("picked %d: the one marked down", i)
		}
	}
}

func TestP2CPassesOverUnresponsive(t *testing.T) {
	eps := deadAndAlive()
	now := t0 + 200*ms
	got := map[int]int{}
	for range 10000 {
		got[IndexP2C(eps, now, rand.Uint64())]++
	}
	if got[0]+got[1] != 0 || got[2] == 0 || got[3] == 0 {
		t.Errorf("picks by index with 0 and 1 silent for 200 ms: %v; want none on them", got)
	}
	// Every endpoint unresponsive: P2C still picks (by cost), never -1.
	for _, e := range eps[2:] {
		e.Start(t0)
		e.Start(t0)
	}
	for range 100 {
		if i := IndexP2C(eps, now, rand.Uint64()); i < 0 {
			t.Fatal("no pick with every endpoint unresponsive")
		}
	}
}

func TestP2CAvailablePrefersResponsive(t *testing.T) {
	a, err := NewAccrual(accrual.Config{ConsecutiveFailures: 5, MinPenalty: time.Second, MaxPenalty: time.Minute, MinHealthyPercent: 50})
	if err != nil {
		t.Fatal(err)
	}
	var bs []*Breaker
	for _, e := range deadAndAlive() {
		bs = append(bs, a.Add(e))
	}
	now := t0 + 200*ms
	got := map[int]int{}
	for range 10000 {
		got[IndexP2CAvailable(bs, now, rand.Uint64())]++
	}
	if got[0]+got[1] != 0 || got[2] == 0 || got[3] == 0 {
		t.Errorf("picks by index with 0 and 1 silent for 200 ms: %v; want none on them", got)
	}
}
