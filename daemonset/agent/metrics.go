package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	corev1 "k8s.io/api/core/v1"

	"github.com/plexus-mesh/plexus/daemonset/conflist"
)

// Metrics are the agent's Prometheus metrics, registered on a registry the
// caller owns.
type Metrics struct {
	Installs      *prometheus.CounterVec // by what: binary, credentials, conflist
	Repatches     prometheus.Counter
	Fights        prometheus.Counter
	Errors        *prometheus.CounterVec // by stage
	TokenSyncs    prometheus.Counter
	TaintRemovals prometheus.Counter
	Ready         prometheus.Gauge
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		Installs:      f.NewCounterVec(prometheus.CounterOpts{Name: "plexus_node_installs_total", Help: "Writes that put the CNI plugin in place, by what was written (binary, credentials, conflist)."}, []string{"what"}),
		Repatches:     f.NewCounter(prometheus.CounterOpts{Name: "plexus_node_repatches_total", Help: "Times the primary CNI config was rewritten by another component and patched again."}),
		Fights:        f.NewCounter(prometheus.CounterOpts{Name: "plexus_node_fights_total", Help: "Times repeated rewrites of the primary CNI config made the agent back off."}),
		Errors:        f.NewCounterVec(prometheus.CounterOpts{Name: "plexus_node_errors_total", Help: "Failed attempts, by stage (install, patch, token, taint, event, repair, report)."}, []string{"stage"}),
		TokenSyncs:    f.NewCounter(prometheus.CounterOpts{Name: "plexus_node_token_syncs_total", Help: "Times the rotated service account token was copied for the plugin."}),
		TaintRemovals: f.NewCounter(prometheus.CounterOpts{Name: "plexus_node_taint_removals_total", Help: "Times the plexus.dev/cni-not-ready taint was removed from the node."}),
		Ready:         f.NewGauge(prometheus.GaugeOpts{Name: "plexus_node_ready", Help: "1 when the plugin is installed and last in the primary CNI config."}),
	}
	return m
}

// readiness is the agent's health as the guard last reported it; it
// implements guard.Observer together with the metrics and the log.
type readiness struct {
	m   *Metrics
	log *slog.Logger

	// becameReady gets a signal (never blocking) on each move to ready.
	becameReady chan struct{}
	// events, if not nil, takes Events for the node (never blocking).
	events chan nodeEvent

	mu     sync.Mutex
	ready  bool
	reason string
}

func newReadiness(m *Metrics, log *slog.Logger) *readiness {
	return &readiness{m: m, log: log, reason: "starting", becameReady: make(chan struct{}, 1)}
}

func (r *readiness) Patched(res conflist.Result, repatch bool) {
	if repatch {
		r.m.Repatches.Inc()
		r.log.Info("primary CNI config was rewritten; patched it again", "path", res.Path)
		return
	}
	r.m.Installs.WithLabelValues("conflist").Inc()
	r.log.Info("added plexus-cni to the primary CNI config", "path", res.Path, "converted_from", res.From)
}

// nodeEvent is an Event to record on the node.
type nodeEvent struct{ typ, reason, message string }

func (r *readiness) event(typ, reason, message string) {
	if r.events == nil {
		return
	}
	select {
	case r.events <- nodeEvent{typ, reason, message}:
	default: // the API server is slow; the log and metrics still have it
	}
}

func (r *readiness) Failed(err error) {
	r.m.Errors.WithLabelValues("patch").Inc()
	r.log.Error("patching the primary CNI config", "err", err)
	reason := "CNIConfigPatchFailed"
	var inv *conflist.InvalidError
	if errors.As(err, &inv) {
		reason = "CNIConfigInvalid"
	}
	r.event(corev1.EventTypeWarning, reason, err.Error())
}

func (r *readiness) Fight(rewrites int, backoff time.Duration) {
	r.m.Fights.Inc()
	const hint = "plexus-cni must stay last in the chain: configure the primary CNI to keep it, or stop whatever rewrites the file"
	r.log.Warn("another component keeps rewriting the primary CNI config; backing off",
		"rewrites", rewrites, "backoff", backoff, "hint", hint)
	r.event(corev1.EventTypeWarning, "CNIConfigFight",
		fmt.Sprintf("the primary CNI config was rewritten %d times in a short time; waiting %v before patching again. Hint: %s", rewrites, backoff, hint))
}

func (r *readiness) Ready(ok bool, reason string) {
	r.mu.Lock()
	changed := ok != r.ready
	r.ready, r.reason = ok, reason
	r.mu.Unlock()
	if ok {
		r.m.Ready.Set(1)
	} else {
		r.m.Ready.Set(0)
	}
	if changed {
		r.log.Info("readiness changed", "ready", ok, "reason", reason)
		if ok {
			select {
			case r.becameReady <- struct{}{}:
			default:
			}
		}
	}
}

// ServeHTTP answers /ready: 200 when ready, 503 with the reason otherwise.
func (r *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	r.mu.Lock()
	ok, reason := r.ready, r.reason
	r.mu.Unlock()
	if !ok {
		http.Error(w, "not ready: "+reason, http.StatusServiceUnavailable)
		return
	}
	fmt.Fprintln(w, "ready")
}

// Handler serves /ready and /metrics.
func handler(r *readiness, g prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/ready", r)
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	return mux
}
