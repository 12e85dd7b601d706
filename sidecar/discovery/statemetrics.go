package discovery

import "github.com/prometheus/client_golang/prometheus"

// balancerCollector exports the balancer's state as metrics when scraped:
// outbound_http_balancer_endpoints{endpoint_state="ready|pending"}
// (unresponsive, ejected, probing with the probe in flight, and
// terminating endpoints not in use are pending),
// outbound_http_balancer_unresponsive_total and failure accrual's ejections and probes, per
// backend Service port, and with zone-aware balancing on,
// outbound_http_balancer_zone_requests_total{zone_locality="local|remote"}.
// Sets of the same backend (asked for by address and by name) are summed.
type balancerCollector struct {
	r                                               *Resolver
	endpoints, ejected, probed, zoned, unresponsive *prometheus.Desc
}

func newBalancerCollector(r *Resolver) *balancerCollector {
	backend := []string{"backend_namespace", "backend_name", "backend_port"}
	return &balancerCollector{
		r: r,
		endpoints: prometheus.NewDesc("outbound_http_balancer_endpoints",
			"Endpoints of each backend by state: ready takes requests; pending does not (unresponsive, ejected by failure accrual, its probe in flight, or terminating).",
			append(backend, "endpoint_state"), nil),
		ejected: prometheus.NewDesc("outbound_http_balancer_ejections_total",
			"Endpoints ejected by failure accrual, re-ejections after a failed probe included (since accrual was configured for the backend).", backend, nil),
		probed: prometheus.NewDesc("outbound_http_balancer_probes_total",
			"Probe requests sent to ejected endpoints whose penalty ended (since accrual was configured for the backend).", backend, nil),
		unresponsive: prometheus.NewDesc("outbound_http_balancer_unresponsive_total",
			"Times an endpoint was marked unresponsive: a request waited on it past its silence limit and ended with no response byte from it meanwhile, or a connection to it could not be opened; picks pass it over until it answers or accepts a probe connection.", backend, nil),
		zoned: prometheus.NewDesc("outbound_http_balancer_zone_requests_total",
			"Requests balanced zone-aware, by whether the endpoint was in the proxy's own zone (local) or not (remote).",
			append(backend, "zone_locality"), nil),
	}
}

func (c *balancerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.endpoints
	ch <- c.ejected
	ch <- c.probed
	ch <- c.zoned
	ch <- c.unresponsive
}

func (c *balancerCollector) Collect(ch chan<- prometheus.Metric) {
	type key struct{ ns, name, port string }
	type sums struct {
		ready, pending    float64
		accrual           bool
		ejections, probes float64
		unresponsive      float64
		zoned             bool
		local, remote     float64
	}
	by := map[key]*sums{}
	for _, set := range c.r.Endpoints() {
		ns, name, port := set.backendLabels()
		k := key{ns, name, port}
		s := by[k]
		if s == nil {
			s = &sums{}
			by[k] = s
		}
		s.unresponsive += float64(set.Unresponsive)
		for _, e := range set.Endpoints {
			if e.Ready() {
				s.ready++
			} else {
				s.pending++
			}
		}
		if set.FailureAccrual {
			s.accrual = true
			s.ejections += float64(set.Ejections)
			s.probes += float64(set.Probes)
		}
		if set.LocalZone != "" {
			s.zoned = true
			s.local += float64(set.LocalRequests)
			s.remote += float64(set.RemoteRequests)
		}
	}
	for k, s := range by {
		ch <- prometheus.MustNewConstMetric(c.endpoints, prometheus.GaugeValue, s.ready, k.ns, k.name, k.port, "ready")
		ch <- prometheus.MustNewConstMetric(c.endpoints, prometheus.GaugeValue, s.pending, k.ns, k.name, k.port, "pending")
		ch <- prometheus.MustNewConstMetric(c.unresponsive, prometheus.CounterValue, s.unresponsive, k.ns, k.name, k.port)
		if s.accrual {
			ch <- prometheus.MustNewConstMetric(c.ejected, prometheus.CounterValue, s.ejections, k.ns, k.name, k.port)
			ch <- prometheus.MustNewConstMetric(c.probed, prometheus.CounterValue, s.probes, k.ns, k.name, k.port)
		}
		if s.zoned {
			ch <- prometheus.MustNewConstMetric(c.zoned, prometheus.CounterValue, s.local, k.ns, k.name, k.port, "local")
			ch <- prometheus.MustNewConstMetric(c.zoned, prometheus.CounterValue, s.remote, k.ns, k.name, k.port, "remote")
		}
	}
}
