package discovery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// BenchmarkPickRecord is the balancer's whole per-request work on the
// proxy's path: pick an endpoint of a resolved service (peak-EWMA P2C,
// with failure accrual or without), sample its RTT at the first byte,
// report the outcome and release it; and with zone-aware balancing on
// (half the endpoints in the proxy's zone), which picks two pairs. The
// target: under 200 ns, no allocation.
func BenchmarkPickRecord(b *testing.B) {
	for _, c := range []struct{ withAccrual, zoned bool }{{false, false}, {true, false}, {false, true}} {
		withAccrual := c.withAccrual
		b.Run(fmt.Sprintf("accrual=%v/zone=%v", withAccrual, c.zoned), func(b *testing.B) {
			e := newEnv(&testing.T{}, nil)
			defer e.r.Close()
			var addrs []*destinationpb.WeightedAddr
			for i := range 10 {
				addrs = append(addrs, inZone(fmt.Sprintf("10.1.0.%d:8080", i+1), []string{"zone-a", "zone-b"}[i%2]))
			}
			e.srv.Set(svc.String(), add(addrs...))
			backend := &routes.Backend{}
			if c.zoned {
				backend.LocalZone = "zone-a"
			}
			if withAccrual {
				backend.Accrual = &accrual.Config{ConsecutiveFailures: 7, MinPenalty: time.Second, MaxPenalty: time.Minute, JitterRatio: 0.5, MinHealthyPercent: 50}
			}
			ctx := context.Background()
			if _, err := e.r.PickHTTP(ctx, svc, backend); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			for b.Loop() {
				p, _ := e.r.PickHTTP(ctx, svc, backend)
				p.FirstByte()
				p.Report(balance.OutcomeSuccess)
				p.Done()
			}
		})
	}
}
