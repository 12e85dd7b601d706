package balance

import (
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
)

// Random words at the ends of the jitter: u = 0 and u just below 1.
const (
	rndLow  uint64 = 0
	rndHigh uint64 = math.MaxUint64
)

func newAccrual(t testing.TB, c accrual.Config) *Accrual {
	t.Helper()
	a, err := NewAccrual(c)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// breakers returns n fresh breakers under one accrual with c.
func breakers(t testing.TB, c accrual.Config, n int) (*Accrual, []*Breaker) {
	a := newAccrual(t, c)
	bs := make([]*Breaker, n)
	for i := range bs {
		bs[i] = a.Add(NewEndpoint(Config{}, 0, t0))
	}
	return a, bs
}

func fail(b *Breaker, now int64, times int) {
	for range times {
		b.Failure(now, rndLow)
	}
}

// noJitter is the default config without jitter, penalties 1s to 3s.
func noJitter() accrual.Config {
	c := accrual.DefaultConfig()
	c.JitterRatio, c.MaxPenalty = 0, 3*time.Second
	return c
}

func wantState(t *testing.T, what string, b *Breaker, now int64, want BreakerState) {
	t.Helper()
	if got := b.State(now); got != want {
		t.Errorf("%s: state %s, want %s", what, got, want)
	}
	if got, want := b.Available(now), want == StateReady || want == StateProbing; got != want {
		t.Errorf("%s: available %v, want %v", what, got, want)
	}
}

func TestBelowThresholdNotEjected(t *testing.T) {
	_, bs := breakers(t, accrual.DefaultConfig(), 3)
	b := bs[0]
	for round := range 3 { // a success in between starts the count again
		fail(b, t0, 6)
		wantState(t, "after 6 failures", b, t0, StateReady)
		b.Success(t0)
		if b.ConsecutiveFailures() != 0 {
			t.Fatalf("round %d: success left %d failures", round, b.ConsecutiveFailures())
		}
	}
	fail(b, t0, 7)
	wantState(t, "after 7 failures", b, t0, StateEjected)
}

func TestEjectionPenaltyJitterBounds(t *testing.T) {
	c := accrual.DefaultConfig() // 1s, jitter 0.5: [0.75s, 1.25s)
	for _, tc := range []struct {
		rnd    uint64
		lo, hi time.Duration
	}{
		{rndLow, 750 * time.Millisecond, 750 * time.Millisecond},
		{rndHigh, 1250*time.Millisecond - time.Microsecond, 1250 * time.Millisecond},
		{1 << 63, time.Second, time.Second},
	} {
		_, bs := breakers(t, c, 3)
		b := bs[0]
		fail(b, t0, 6)
		b.Failure(t0, tc.rnd)
		end, ok := b.PenaltyEnd()
		if d := time.Duration(end - t0); !ok || d < tc.lo || d > tc.hi {
			t.Errorf("rnd %#x: penalty %s (ejected %v), want in [%s, %s]", tc.rnd, d, ok, tc.lo, tc.hi)
		}
		wantState(t, "just before the end", b, end-1, StateEjected)
		wantState(t, "at the end", b, end, StateProbing)
	}
	// Random draws stay inside [0.75s, 1.25s) and spread over it.
	lo, hi := time.Hour, time.Duration(0)
	for range 10000 {
		p := c.Penalty(1, rand.Uint64())
		lo, hi = min(lo, p), max(hi, p)
	}
	if lo < 750*time.Millisecond || hi >= 1250*time.Millisecond || lo > 760*time.Millisecond || hi < 1240*time.Millisecond {
		t.Errorf("random penalties span [%s, %s], want about [0.75s, 1.25s)", lo, hi)
	}
}

func TestPenaltySchedule(t *testing.T) {
	c := accrual.DefaultConfig()
	c.JitterRatio = 0
	want := []time.Duration{1, 2, 4, 8, 16, 32, 60, 60}
	for k, w := range want {
		if got := c.Penalty(k+1, rand.Uint64()); got != w*time.Second {
			t.Errorf("Penalty(%d) = %s, want %s", k+1, got, w*time.Second)
		}
	}
	if got := c.Penalty(1000, 0); got != time.Minute {
		t.Errorf("Penalty(1000) = %s, want the max", got)
	}
	c.MaxPenalty = time.Duration(math.MaxInt64)
	if got := c.Penalty(80, 0); got <= 0 {
		t.Errorf("Penalty(80) with no max = %s, overflowed", got)
	}
}

func TestProbeExactlyOnce(t *testing.T) {
	_, bs := breakers(t, noJitter(), 3)
	b := bs[0]
	fail(b, t0, 7)
	now := t0 + sec - 1
	for range 1000 { // penalty running: never picked
		if PickP2CAvailable(bs, now, rand.Uint64()) == b {
			t.Fatal("ejected endpoint picked during its penalty")
		}
	}
	now = t0 + sec
	picks := 0
	for range 1000 {
		if PickP2CAvailable(bs, now, rand.Uint64()) == b {
			picks++
		}
	}
	if picks != 1 {
		t.Fatalf("probing endpoint picked %d times, want exactly 1", picks)
	}
	wantState(t, "probe in flight", b, now, StateProbeInFlight)
	if got := PickP2CAvailable(bs[:1], now+10*sec, 0); got != nil {
		t.Errorf("alone with its probe in flight: picked %v, want nil", got)
	}
	b.Cancel() // the probe is given up: another request may probe
	wantState(t, "probe cancelled", b, now, StateProbing)
	if PickP2CAvailable(bs[:1], now, 0) != b {
		t.Error("after Cancel the probe is not claimable again")
	}
}

func TestProbeFailureDoublesPenalty(t *testing.T) {
	a, bs := breakers(t, noJitter(), 3) // 1s, 2s, 3s (max), 3s
	b := bs[0]
	fail(b, t0, 7)
	now := t0
	for k, want := range []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 3 * time.Second} {
		end, _ := b.PenaltyEnd()
		if got := time.Duration(end - now); got != want {
			t.Fatalf("ejection %d: penalty %s, want %s", k+1, got, want)
		}
		now = end
		if PickP2CAvailable(bs[:1], now, 0) != b {
			t.Fatalf("ejection %d: probe not taken at the end of the penalty", k+1)
		}
		b.Failure(now, rndLow)
		wantState(t, "after a failed probe", b, now, StateEjected)
	}
	if s := a.Stats(); s.Ejections != 5 || s.Probes != 4 || s.Out != 1 || s.Restored != 0 {
		t.Errorf("stats %+v, want 5 ejections, 4 probes, 1 out", s)
	}
}

func TestProbeSuccessRestores(t *testing.T) {
	a, bs := breakers(t, noJitter(), 3)
	b := bs[0]
	fail(b, t0, 7)
	b.Success(t0 + sec/2) // a request placed before the ejection: ignored
	fail(b, t0+sec/2, 3)
	wantState(t, "outcomes during the penalty", b, t0+sec/2, StateEjected)
	now := t0 + sec
	PickP2CAvailable(bs[:1], now, 0)
	b.Failure(now, rndLow) // second ejection: 2s
	now += 2 * sec
	PickP2CAvailable(bs[:1], now, 0)
	b.Success(now)
	wantState(t, "after a successful probe", b, now, StateReady)
	if s := a.Stats(); s.Out != 0 || s.Restored != 1 || b.ConsecutiveFailures() != 0 {
		t.Fatalf("after restore: stats %+v, failures %d", s, b.ConsecutiveFailures())
	}
	fail(b, now, 6)
	wantState(t, "restored, 6 failures", b, now, StateReady)
	b.Failure(now, rndLow)
	if end, _ := b.PenaltyEnd(); end-now != sec {
		t.Errorf("ejection after a restore: penalty %s, want the min again", time.Duration(end-now))
	}
}

func TestFloorThreeEndpoints(t *testing.T) {
	a, bs := breakers(t, noJitter(), 3) // 50 % of 3: at most 1 out
	fail(bs[0], t0, 7)
	fail(bs[1], t0, 20)
	wantState(t, "first to fail", bs[0], t0, StateEjected)
	wantState(t, "second to fail, held by the floor", bs[1], t0, StateReady)
	if s := a.Stats(); s.Out != 1 || s.FloorHeld != 14 {
		t.Errorf("stats %+v, want 1 out, 14 held", s)
	}
	// bs[0] restored: the next failure of bs[1] ejects it.
	now := t0 + sec
	PickP2CAvailable(bs[:1], now, 0)
	bs[0].Success(now)
	bs[1].Failure(now, rndLow)
	wantState(t, "held one, once there is room", bs[1], now, StateEjected)
	wantState(t, "restored one", bs[0], now, StateReady)
	// Removing the ejected one frees its place.
	bs[1].Remove()
	bs[1].Remove()
	if s := a.Stats(); s.Out != 0 || s.Endpoints != 2 {
		t.Errorf("after Remove: stats %+v, want 0 out of 2", s)
	}
	wantState(t, "removed", bs[1], now, StateRemoved)
	// 50 % of 2: one may go out.
	fail(bs[2], now, 7)
	wantState(t, "one of two", bs[2], now, StateEjected)
}

func TestFloorBounds(t *testing.T) {
	for _, tc := range []struct{ n, pct, want int }{
		{1, 50, 0}, {2, 50, 1}, {3, 50, 1}, {4, 50, 2}, {10, 50, 5}, {10, 0, 10},
		{10, 100, 0}, {3, 34, 1}, {3, 33, 2}, {7, 90, 0}, {10, 90, 1},
	} {
		c := noJitter()
		c.MinHealthyPercent = tc.pct
		a, bs := breakers(t, c, tc.n)
		for _, b := range bs {
			fail(b, t0, 7)
		}
		if got := a.Stats().Out; got != int64(tc.want) {
			t.Errorf("%d endpoints, floor %d%%: %d out, want %d", tc.n, tc.pct, got, tc.want)
		}
		if got := CountAvailable(bs, t0); got != tc.n-tc.want {
			t.Errorf("%d endpoints, floor %d%%: %d available, want %d", tc.n, tc.pct, got, tc.n-tc.want)
		}
	}
}

// TestAllFailingTrafficFlows runs 200 req/s for a minute against three
// endpoints that fail every request: at most one is ever out, no pick
// comes back empty, and the two others keep taking requests.
func TestAllFailingTrafficFlows(t *testing.T) {
	a, bs := breakers(t, accrual.DefaultConfig(), 3)
	r := rand.New(rand.NewPCG(1, 2))
	taken := make(map[*Breaker]int)
	for now := t0; now < t0+60*sec; now += 5 * ms {
		b := PickP2CAvailable(bs, now, r.Uint64())
		if b == nil {
			t.Fatalf("at %s: no endpoint picked", time.Duration(now-t0))
		}
		taken[b]++
		h := b.Start(now)
		h.Observe(now + ms)
		h.Done()
		b.Failure(now+ms, r.Uint64())
		if out, avail := a.Stats().Out, CountAvailable(bs, now+ms); out > 1 || avail < 2 {
			t.Fatalf("at %s: %d out, %d available", time.Duration(now-t0), out, avail)
		}
	}
	in := 0
	for _, b := range bs {
		if taken[b] > 4000 {
			in++
		}
	}
	s := a.Stats()
	if in != 2 || s.Out != 1 || s.Ejections < 5 {
		t.Errorf("requests %v, stats %+v: want two endpoints taking most requests, one out, re-ejected", taken, s)
	}
	t.Logf("requests per endpoint %d %d %d, stats %+v", taken[bs[0]], taken[bs[1]], taken[bs[2]], s)
}

// TestOneFailingAvoided: one of three endpoints fails everything; after
// its first ejection it takes only its probes.
func TestOneFailingAvoided(t *testing.T) {
	a, bs := breakers(t, accrual.DefaultConfig(), 3)
	r := rand.New(rand.NewPCG(3, 4))
	bad, total, toBad := bs[2], 0, 0
	for now := t0; now < t0+60*sec; now += 5 * ms {
		b := PickP2CAvailable(bs, now, r.Uint64())
		if now >= t0+sec {
			total++
			if b == bad {
				toBad++
			}
		}
		if b == bad {
			b.Failure(now+ms, r.Uint64())
		} else {
			b.Success(now + ms)
		}
	}
	if s := a.Stats(); toBad > int(s.Probes) || toBad > 10 { // probes only (one may fall in the first second)
		t.Errorf("failing endpoint took %d of %d requests after the first second, probes %d", toBad, total, s.Probes)
	}
}

func TestPickAvailableEdges(t *testing.T) {
	c := noJitter()
	c.MinHealthyPercent = 0 // all may go out
	_, bs := breakers(t, c, 1000)
	if PickP2CAvailable(nil, t0, 1) != nil {
		t.Error("no endpoints: want nil")
	}
	for _, b := range bs[1:] {
		fail(b, t0, 7)
	}
	for range 100 { // one left among 1000: found by the scan
		if got := PickP2CAvailable(bs, t0, rand.Uint64()); got != bs[0] {
			t.Fatalf("picked %p, want the one available", got)
		}
	}
	fail(bs[0], t0, 7)
	if got := PickP2CAvailable(bs, t0, rand.Uint64()); got != nil {
		t.Errorf("all ejected (floor 0): picked %p, want nil", got)
	}
	// At the end of the penalties each probe is taken once: 1000 picks.
	seen := make(map[*Breaker]bool)
	for range 1000 {
		b := PickP2CAvailable(bs, t0+sec, rand.Uint64())
		if b == nil || seen[b] {
			t.Fatalf("probe pick returned %p (seen %v)", b, seen[b])
		}
		seen[b] = true
	}
	if PickP2CAvailable(bs, t0+sec, rand.Uint64()) != nil {
		t.Error("all probes in flight: want nil")
	}
}

func TestPickAvailablePrefersLowerCost(t *testing.T) {
	a := newAccrual(t, accrual.DefaultConfig())
	fast, slow := NewEndpoint(Config{}, 0, t0), NewEndpoint(Config{}, 0, t0)
	sample(fast, t0, t0+ms)
	sample(slow, t0, t0+100*ms)
	bs := []*Breaker{a.Add(fast), a.Add(slow)}
	for range 100 {
		if got := PickP2CAvailable(bs, t0+100*ms, rand.Uint64()); got != bs[0] {
			t.Fatal("two available: the slower picked")
		}
	}
}

// TestDueProbeGoesFirst: an ejected endpoint whose penalty is over gets
// its probe the first time it is drawn, even against an endpoint that
// costs less: its estimate, unrefreshed while it was out, must not
// postpone the way back (the three-node TestBreaker waited seconds for
// one).
func TestDueProbeGoesFirst(t *testing.T) {
	_, bs := breakers(t, noJitter(), 2)
	sample(bs[0].Endpoint, t0, t0+100*ms) // its last answer was slow
	sample(bs[1].Endpoint, t0, t0+ms)
	fail(bs[0], t0, 7)
	if got := PickP2CAvailable(bs, t0+sec, rand.Uint64()); got != bs[0] {
		t.Fatalf("with its probe due the ejected endpoint was not picked first")
	}
	wantState(t, "after its first draw", bs[0], t0+sec, StateProbeInFlight)
}

// TestPickAvailableTies: two available endpoints whose costs are within
// 1 % share the picks, as in IndexP2C, instead of the first drawn taking
// every one.
func TestPickAvailableTies(t *testing.T) {
	_, bs := breakers(t, noJitter(), 2)
	sample(bs[0].Endpoint, t0, t0+10*ms)
	sample(bs[1].Endpoint, t0, t0+10*ms+50*int64(time.Microsecond)) // 0.5 % more
	got := 0
	for i := range 1000 {
		if PickP2CAvailable(bs, t0+11*ms, uint64(i)*0x9e3779b97f4a7c15) == bs[1] {
			got++
		}
	}
	if got < 400 || got > 600 {
		t.Errorf("the endpoint 0.5 %% costlier got %d of 1000 picks, want about half", got)
	}
}

// TestConcurrentAccrual hammers one accrual from many goroutines: the
// floor holds throughout and the out count matches the breakers' states
// at the end. Run it with -race.
func TestConcurrentAccrual(t *testing.T) {
	c := accrual.DefaultConfig()
	c.ConsecutiveFailures, c.MinPenalty, c.MaxPenalty = 2, 50*time.Microsecond, time.Millisecond
	a, bs := breakers(t, c, 8)
	var clock atomic.Int64
	clock.Store(t0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(g), 9))
			for range 20000 {
				now := clock.Add(1000)
				b := PickP2CAvailable(bs, now, r.Uint64())
				if b == nil {
					t.Error("no endpoint picked")
					return
				}
				if out := a.Stats().Out; out > 4 {
					t.Errorf("%d out of 8, floor allows 4", out)
				}
				if r.IntN(3) == 0 || indexOf(bs, b) < 3 {
					b.Failure(now, r.Uint64())
				} else {
					b.Success(now)
				}
			}
		})
	}
	wg.Wait()
	out := 0
	for _, b := range bs {
		if b.State(0) != StateReady {
			out++
		}
	}
	if s := a.Stats(); s.Out != int64(out) || s.Ejections == 0 || s.Probes == 0 || s.Restored == 0 {
		t.Errorf("stats %+v, %d breakers out", s, out)
	}
}

// TestConcurrentProbeClaim: many goroutines pick at once among endpoints
// whose penalties are over; each probe goes to exactly one of them.
func TestConcurrentProbeClaim(t *testing.T) {
	c := noJitter()
	c.MinHealthyPercent = 0
	for range 20 {
		_, bs := breakers(t, c, 4)
		for _, b := range bs {
			fail(b, t0, 7)
		}
		var got [4]atomic.Int32
		var none atomic.Int32
		var wg sync.WaitGroup
		for g := range 16 {
			wg.Go(func() {
				for i := range 8 {
					if b := PickP2CAvailable(bs, t0+sec, uint64(g*8+i)*0x9e3779b97f4a7c15); b != nil {
						got[indexOf(bs, b)].Add(1)
					} else {
						none.Add(1)
					}
				}
			})
		}
		wg.Wait()
		for i := range got {
			if n := got[i].Load(); n != 1 {
				t.Fatalf("endpoint %d probed %d times, want 1", i, n)
			}
		}
		if none.Load() != 16*8-4 {
			t.Fatalf("%d empty picks, want %d", none.Load(), 16*8-4)
		}
	}
}

func indexOf(bs []*Breaker, b *Breaker) int {
	for i, x := range bs {
		if x == b {
			return i
		}
	}
	return -1
}

func TestAccrualNoAllocations(t *testing.T) {
	c := accrual.DefaultConfig()
	c.ConsecutiveFailures, c.MinHealthyPercent = 2, 0
	_, bs := breakers(t, c, 10)
	now := t0
	r := rand.New(rand.NewPCG(5, 6))
	allocs := testing.AllocsPerRun(10000, func() {
		now += ms
		b := PickP2CAvailable(bs, now, r.Uint64())
		if b == nil {
			return
		}
		h := b.Start(now)
		h.Observe(now + ms)
		h.Done()
		if r.IntN(2) == 0 { // ejections, probes and restores all happen
			b.Failure(now, r.Uint64())
		} else {
			b.Success(now)
		}
	})
	if allocs != 0 {
		t.Errorf("pick and record with accrual allocate %.1f times", allocs)
	}
}

func TestAccrualConfigValidate(t *testing.T) {
	if err := accrual.DefaultConfig().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	for name, mutate := range map[string]func(*accrual.Config){
		"zero failures":      func(c *accrual.Config) { c.ConsecutiveFailures = 0 },
		"zero min penalty":   func(c *accrual.Config) { c.MinPenalty = 0 },
		"max below min":      func(c *accrual.Config) { c.MaxPenalty = c.MinPenalty - 1 },
		"negative jitter":    func(c *accrual.Config) { c.JitterRatio = -0.1 },
		"jitter above 1":     func(c *accrual.Config) { c.JitterRatio = 1.1 },
		"NaN jitter":         func(c *accrual.Config) { c.JitterRatio = math.NaN() },
		"negative percent":   func(c *accrual.Config) { c.MinHealthyPercent = -1 },
		"percent above 100":  func(c *accrual.Config) { c.MinHealthyPercent = 101 },
		"zero config":        func(c *accrual.Config) { *c = accrual.Config{} },
		"negative max/min 0": func(c *accrual.Config) { c.MinPenalty, c.MaxPenalty = -1, -1 },
	} {
		c := accrual.DefaultConfig()
		mutate(&c)
		if c.Validate() == nil {
			t.Errorf("%s: accepted", name)
		}
		if _, err := NewAccrual(c); err == nil {
			t.Errorf("%s: NewAccrual accepted", name)
		}
	}
	c := accrual.DefaultConfig()
	c.JitterRatio, c.MinHealthyPercent, c.MaxPenalty = 1, 0, c.MinPenalty
	if err := c.Validate(); err != nil {
		t.Errorf("edge values: %v", err)
	}
}

func TestIsFailureStatus(t *testing.T) {
	for _, tc := range []struct {
		http int
		grpc string
		want bool
	}{
		{200, "", false}, {0, "", false}, {404, "", false}, {429, "", false}, {499, "", false},
		{500, "", true}, {502, "", true}, {503, "", true}, {504, "", true}, {599, "", true}, {600, "", false},
		{200, "0", false}, {200, "OK", false},
		{200, "14", true}, {200, "UNAVAILABLE", true}, {200, "unavailable", true},
		{200, "13", true}, {200, "INTERNAL", true},
		{200, "15", true}, {200, "DATA_LOSS", true}, {200, "data-loss", true},
		{200, "4", true}, {200, "DEADLINE_EXCEEDED", true}, {200, "deadline-exceeded", true},
		{200, "1", false}, {200, "CANCELLED", false}, {200, "2", false}, {200, "UNKNOWN", false},
		{200, "8", false}, {200, "RESOURCE_EXHAUSTED", false}, {200, "12", false}, {200, "UNIMPLEMENTED", false},
		{200, "3", false}, {200, "5", false}, {200, "7", false}, {200, "16", false}, {200, "140", false},
		{500, "0", true}, // an HTTP 5xx fails whatever gRPC says
	} {
		if got := IsFailureStatus(tc.http, tc.grpc); got != tc.want {
			t.Errorf("IsFailureStatus(%d, %q) = %v, want %v", tc.http, tc.grpc, got, tc.want)
		}
	}
	if n := testing.AllocsPerRun(100, func() { IsFailureStatus(200, "deadline-exceeded") }); n != 0 {
		t.Errorf("IsFailureStatus allocates %.1f times", n)
	}
}
