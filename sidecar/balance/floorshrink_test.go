package balance

import (
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
)

// The floor holds after the set shrinks: one of two endpoints ejected
// (allowed: maxOut(2) = 1), then the other removed by discovery. The one
// left is out though maxOut(1) = 0: it gets its probe at once instead of
// nothing being available for the whole penalty.
func TestFloorAfterShrink(t *testing.T) {
	a, _ := NewAccrual(accrual.Config{ConsecutiveFailures: 1, MinPenalty: time.Minute, MaxPenalty: time.Minute, MinHealthyPercent: 50})
	cfg := Config{}
	A := a.Add(NewEndpoint(cfg, 1, 0))
	B := a.Add(NewEndpoint(cfg, 1, 0))
	A.Failure(0, 0)
	if A.State(1) != StateEjected {
		t.Fatalf("A %v", A.State(1))
	}
	B.Remove()
	bs := []*Breaker{A}
	if i := IndexP2CAvailable(bs, int64(time.Second), 1); i < 0 {
		st := a.Stats()
		t.Errorf("no endpoint available with %d members and %d out (floor 50%%: at most %d out)", st.Endpoints, st.Out, a.cfg.MaxOut(st.Endpoints))
	}
}
