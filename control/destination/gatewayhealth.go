package destination

// Gateway health (multicluster gateway mode): destination probes each
// linked cluster's gateway itself, every GatewayProbeInterval, with a
// health check the gateway answers only while it can serve
// (mesh/passthrough.Probe). GatewayProbeFailures failures in a row, each
// a refusal, a reset or GatewayProbeTimeout of silence, withdraw the
// endpoints of that cluster's gateway-mode mirrors (the proxies then have
// nothing to send to there rather than a dead gateway); one success
// brings them back. Refused is seen within about one interval, a
// blackholed gateway within interval + failures × timeout.

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/mesh/passthrough"
)

// Gateway probing.
const (
	GatewayProbeInterval = 500 * time.Millisecond
	GatewayProbeTimeout  = 750 * time.Millisecond
	GatewayProbeFailures = 2
)

// gatewayGauges are the gateways' metrics, by cluster.
type gatewayGauges struct {
	healthy, latency *prometheus.GaugeVec
}

// gatewayGauge is one cluster's.
type gatewayGauge struct {
	healthy, latency prometheus.Gauge
}

func (g gatewayGauges) of(cluster string) gatewayGauge {
	return gatewayGauge{g.healthy.WithLabelValues(cluster), g.latency.WithLabelValues(cluster)}
}

func (g gatewayGauges) forget(cluster string) {
	g.healthy.DeleteLabelValues(cluster)
	g.latency.DeleteLabelValues(cluster)
}

// gatewayHealth is one linked cluster's gateway's state.
type gatewayHealth struct {
	healthy bool
	fails   int
}

// probeGateway probes cluster name's gateway gw until ctx ends, telling
// changed of every change of health (healthy first, until probes fail).
func probeGateway(ctx context.Context, gw netip.AddrPort, gauge gatewayGauge, changed func(healthy bool)) {
	var d net.Dialer
	dial := func(ctx context.Context, a netip.AddrPort) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", a.String())
	}
	h := gatewayHealth{healthy: true}
	gauge.healthy.Set(1)
	t := time.NewTicker(GatewayProbeInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, GatewayProbeTimeout)
		start := time.Now()
		err := passthrough.Probe(pctx, dial, gw)
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

// observe folds one probe's result in and returns the health.
func (h *gatewayHealth) observe(ok bool) bool {
	if ok {
		h.healthy, h.fails = true, 0
		return true
	}
	if h.fails++; h.fails >= GatewayProbeFailures {
		h.healthy = false
	}
	return h.healthy
}
