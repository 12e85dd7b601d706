package discovery

import (
	"context"
	"testing"
)

// The per-request work of a resolved destination — its policy, an
// endpoint pick and its release — allocates nothing.
func TestPolicyAndPickAllocateNothing(t *testing.T) {
	e := newEnv(t, nil)
	e.srv.Set(svc.String(), add(wa("10.1.0.1:8080", webID)))
	ctx := context.Background()
	e.r.Policy(ctx, svc)
	if p, err := e.r.Pick(ctx, svc); err != nil || p.Fallback {
		t.Fatalf("pick %+v %v", p, err)
	} else {
		p.Done()
	}
	allocs := testing.AllocsPerRun(1000, func() {
		e.r.Policy(ctx, svc)
		p, _ := e.r.Pick(ctx, svc)
		p.Done()
	})
	if allocs != 0 {
		t.Errorf("%v allocations per request, want 0", allocs)
	}
}
