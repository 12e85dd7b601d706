package destination

// Linked clusters' health (multicluster): destination checks each linked
// cluster's gateway and API server itself, every ProbeInterval.
// ProbeFailures failures in a row, each a refusal, a reset, an error or
// ProbeTimeout of silence, mark it down; one success brings it back. So a
// refusal is seen within about one interval, silence (a blackhole) within
// interval + failures × timeout, under 3 s.
//
//   - The gateway (gateway mode) is asked with a health check it answers
//     only while it can serve (mesh/passthrough.Probe). While it is down,
//     the endpoints of that cluster's gateway-mode mirrors are withdrawn:
//     the proxies have nothing to send there rather than a dead gateway.
//   - The API server is asked GET /readyz on a connection of its own
//     (kubeclient.RemoteReady). While it is down, that cluster's members
//     of federated Services are withdrawn (the rest of the federation
//     takes the traffic); mirrors keep its last endpoints (there is
//     nothing else to send to, and its pods may well serve: each proxy's
//     own connections still mark a dead pod down).

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/mesh/passthrough"
)

// Health checking of linked clusters.
const (
	ProbeInterval = 500 * time.Millisecond
	ProbeTimeout  = 750 * time.Millisecond
	ProbeFailures = 2
)

// healthGauges are one kind of check's metrics, by cluster.
type healthGauges struct {
	healthy, latency *prometheus.GaugeVec
}

// healthGauge is one cluster's.
type healthGauge struct {
	healthy, latency prometheus.Gauge
}

func (g healthGauges) of(cluster string) healthGauge {
	return healthGauge{g.healthy.WithLabelValues(cluster), g.latency.WithLabelValues(cluster)}
}

func (g healthGauges) forget(cluster string) {
	g.healthy.DeleteLabelValues(cluster)
	g.latency.DeleteLabelValues(cluster)
}

// health is one checked thing's state.
type health struct {
	healthy bool
	fails   int
}

// probe runs check until ctx ends, telling changed of every change of
// health (healthy first, until checks fail).
func probe(ctx context.Context, check func(context.Context) error, gauge healthGauge, changed func(healthy bool)) {
	h := health{healthy: true}
	gauge.healthy.Set(1)
	t := time.NewTicker(ProbeInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, ProbeTimeout)
		start := time.Now()
		err := check(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			gauge.latency.Set(time.Since(start).Seconds())
		}
		if was := h.healthy; h.observe(err == nil) != was {
			if h.healthy {
				gauge.healthy.Set(1)
			} else {
				gauge.healthy.Set(0)
			}
			changed(h.healthy)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// observe folds one check's result in and returns the health.
func (h *health) observe(ok bool) bool {
	if ok {
		h.healthy, h.fails = true, 0
		return true
	}
	if h.fails++; h.fails >= ProbeFailures {
		h.healthy = false
	}
	return h.healthy
}

// gatewayCheck is the health check of gateway gw.
func gatewayCheck(gw netip.AddrPort) func(context.Context) error {
	var d net.Dialer
	dial := func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", a.String())
	}
	return func(ctx context.Context) error { return passthrough.Probe(ctx, dial, gw) }
}

// prober is the checking of one cluster's gateway or API server. It
// outlives the watchers replaced for new credentials (a renewed token),
// so its health carries over.
type prober struct {
	gw     netip.AddrPort // the gateway's: what it checks
	down   bool           // its checks fail; remoteClusters.mu guards it
	cancel context.CancelFunc
}

// probeGatewayLocked checks cluster name's gateway gw (none: stops
// checking), unless that runs already (r.mu held).
func (r *remoteClusters) probeGatewayLocked(name string, gw netip.AddrPort) {
	if p := r.gatewayProbes[name]; p != nil {
		if p.gw == gw {
			return
		}
		p.cancel()
		delete(r.gatewayProbes, name)
		r.gatewayGauges.forget(name)
	}
	if gw.IsValid() {
		p := r.startProbeLocked(name, "gateway", gatewayCheck(gw), r.gatewayGauges, r.gatewayProbes)
		p.gw = gw
		r.gatewayProbes[name] = p
	}
}

// probeAPILocked checks cluster name's API server, through its current
// watcher's credentials, unless that runs already; stop ends it (r.mu
// held).
func (r *remoteClusters) probeAPILocked(name string, stop bool) {
	p := r.apiProbes[name]
	switch {
	case stop && p != nil:
		p.cancel()
		delete(r.apiProbes, name)
		r.apiGauges.forget(name)
	case !stop && p == nil:
		check := func(ctx context.Context) error {
			r.mu.Lock()
			c := r.clusters[name]
			r.mu.Unlock()
			if c == nil {
				return nil // dropped: the probe stops too
			}
			return c.ready(ctx)
		}
		r.apiProbes[name] = r.startProbeLocked(name, "API server", check, r.apiGauges, r.apiProbes)
	}
}

// startProbeLocked starts a prober of cluster name that re-answers the
// cluster's Services when its health changes, while it is in probes.
func (r *remoteClusters) startProbeLocked(name, what string, check func(context.Context) error, gauges healthGauges, probes map[string]*prober) *prober {
	ctx, cancel := context.WithCancel(r.ctx)
	p := &prober{cancel: cancel}
	go probe(ctx, check, gauges.of(name), func(healthy bool) {
		r.mu.Lock()
		defer r.mu.Unlock()
		if probes[name] != p {
			return // replaced
		}
		p.down = !healthy
		r.log.Warn("linked cluster's health changed", "cluster", name, "what", what, "healthy", healthy)
		r.enqueueMirrors(name)
	})
	return p
}
