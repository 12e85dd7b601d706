package identity

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	issued       prometheus.Counter
	rejected     *prometheus.CounterVec
	issuerExpiry prometheus.Gauge
	loadErrors   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		issued:       f.NewCounter(prometheus.CounterOpts{Name: "plexus_identity_certificates_issued_total", Help: "Leaf certificates issued by Certify."}),
		rejected:     f.NewCounterVec(prometheus.CounterOpts{Name: "plexus_identity_certify_rejected_total", Help: "Certify requests refused, by reason."}, []string{"reason"}),
		issuerExpiry: f.NewGauge(prometheus.GaugeOpts{Name: "plexus_identity_issuer_expiry_timestamp_seconds", Help: "NotAfter of the issuer certificate in use, as a Unix time; 0 while none is loaded."}),
		loadErrors:   f.NewCounter(prometheus.CounterOpts{Name: "plexus_identity_issuer_load_errors_total", Help: "Issuer Secret versions that could not be loaded (the previous issuer stays in use)."}),
	}
	for _, r := range rejectReasons() {
		m.rejected.WithLabelValues(r)
	}
	return m
}
