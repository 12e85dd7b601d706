package mirror

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// metrics are the service mirror's, per Link.
type metrics struct {
	ready       *prometheus.GaugeVec
	mirrors     *prometheus.GaugeVec
	tokenExpiry *prometheus.GaugeVec
	renewals    *prometheus.CounterVec
	watchErrors *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		ready: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "plexus_multicluster_link_ready",
			Help: "1 while the Link's Ready condition is True (credentials valid, the linked API server watched), else 0."}, []string{"link", "cluster"}),
		mirrors: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "plexus_multicluster_mirrors",
			Help: "Remote Services the Link selects, by state: mirrored, or failed (a name collision, a missing namespace, an error)."}, []string{"link", "state"}),
		tokenExpiry: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "plexus_multicluster_link_token_expiry_timestamp_seconds",
			Help: "When the token of the Link's credentials expires, as a Unix time (only for bound service account tokens, which the mirror renews)."}, []string{"link"}),
		renewals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plexus_multicluster_link_token_renewals_total",
			Help: "Renewals of the Link's token, by result (ok, error)."}, []string{"link", "result"}),
		watchErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "plexus_multicluster_remote_watch_errors_total",
			Help: "Failed lists and watches of the linked cluster's Services."}, []string{"link"}),
	}
	reg.MustRegister(m.ready, m.mirrors, m.tokenExpiry, m.renewals, m.watchErrors)
	return m
}

// observe records Link l's status and its remote watch r's token.
func (m *metrics) observe(l *mc.Link, st mc.LinkStatus, r *remote) {
	ready := 0.0
	for _, c := range st.Conditions {
		if c.Type == mc.ConditionReady && c.Status == metav1.ConditionTrue {
			ready = 1
		}
	}
	m.ready.WithLabelValues(l.Name, l.Spec.ClusterName).Set(ready)
	mirrored, failed := 0, 0
	for _, ms := range st.MirrorServices {
		for _, c := range ms.Conditions {
			if c.Type != mc.ConditionMirrored {
				continue
			}
			if c.Status == metav1.ConditionTrue {
				mirrored++
			} else {
				failed++
			}
		}
	}
	m.mirrors.WithLabelValues(l.Name, "mirrored").Set(float64(mirrored))
	m.mirrors.WithLabelValues(l.Name, "failed").Set(float64(failed))
	if r != nil && r.tokenOK {
		m.tokenExpiry.WithLabelValues(l.Name).Set(float64(r.token.expires.Unix()))
	}
}

// forget drops Link name's series.
func (m *metrics) forget(name string) {
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{m.ready, m.mirrors, m.tokenExpiry, m.renewals, m.watchErrors} {
		v.DeletePartialMatch(prometheus.Labels{"link": name})
	}
}

// expiresIn is how long until a token expires, for logs.
func expiresIn(t linkToken, now time.Time) time.Duration {
	return t.expires.Sub(now).Round(time.Second)
}
