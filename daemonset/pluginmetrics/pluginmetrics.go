// Package pluginmetrics turns the reports plexus-cni sends after each ADD,
// DEL and CHECK (see cni-plugin/pluginreport) into the node agent's
// Prometheus metrics.
package pluginmetrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/plexus-mesh/plexus/cni-plugin/pluginreport"
)

// Buckets are the duration buckets in seconds, 1 ms to 10 s, with the
// 30 ms target of an ADD among them.
var Buckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}

// Metrics are the plugin's metrics, registered on a registry the caller
// owns.
type Metrics struct {
	Commands *prometheus.CounterVec   // by command and outcome
	Errors   *prometheus.CounterVec   // by command and CNI error code
	Duration *prometheus.HistogramVec // by command
	Decide   *prometheus.HistogramVec // by command (ADD)
	Invalid  prometheus.Counter
}

// NewMetrics creates the metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	f := promauto.With(reg)
	m := &Metrics{
		Commands: f.NewCounterVec(prometheus.CounterOpts{Name: "plexus_node_plugin_commands_total", Help: "CNI commands plexus-cni reported, by command (ADD, DEL, CHECK) and outcome (success, skipped: ADD of a pod that is not meshed, error)."}, []string{"command", "outcome"}),
		Errors:   f.NewCounterVec(prometheus.CounterOpts{Name: "plexus_node_plugin_errors_total", Help: "Failed CNI commands plexus-cni reported, by command and CNI error code (cni-plugin/README.md lists them)."}, []string{"command", "code"}),
		Duration: f.NewHistogramVec(prometheus.HistogramOpts{Name: "plexus_node_plugin_duration_seconds", Help: "Time plexus-cni spent on a command, as it reported it (process start not included).", Buckets: Buckets}, []string{"command"}),
		Decide:   f.NewHistogramVec(prometheus.HistogramOpts{Name: "plexus_node_plugin_decide_seconds", Help: "Part of an ADD spent deciding whether the pod is meshed (the pod lookup), as plexus-cni reported it.", Buckets: Buckets}, []string{"command"}),
		Invalid:  f.NewCounter(prometheus.CounterOpts{Name: "plexus_node_plugin_reports_invalid_total", Help: "Datagrams on the report socket that were not a valid report (garbage, oversized, unknown values)."}),
	}
	return m
}

// Observe counts one valid report.
func (m *Metrics) Observe(r pluginreport.Report) {
	m.Commands.WithLabelValues(r.Command, r.Outcome).Inc()
	if r.Outcome == pluginreport.Error {
		m.Errors.WithLabelValues(r.Command, strconv.FormatUint(uint64(r.Code), 10)).Inc()
	}
	m.Duration.WithLabelValues(r.Command).Observe(r.Elapsed().Seconds())
	if r.Command == pluginreport.Add && r.DecideMS > 0 {
		m.Decide.WithLabelValues(r.Command).Observe(r.Decide().Seconds())
	}
}

// Serve receives reports on l and counts them until ctx ends, then closes
// l (which removes its socket file). Invalid datagrams are counted and
// skipped; it returns an error only when the socket itself fails.
func Serve(ctx context.Context, l *pluginreport.Listener, m *Metrics, log *slog.Logger) error {
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		l.Close()
		close(closed)
	})
	defer stop()
	for {
		r, err := l.Receive()
		switch {
		case err == nil:
			m.Observe(r)
		case errors.Is(err, pluginreport.ErrInvalid):
			m.Invalid.Inc()
			log.Debug("ignored a datagram on the plugin report socket", "err", err)
		case errors.Is(err, net.ErrClosed):
			if !stop() {
				<-closed // closed because ctx ended: let Close remove the file
			}
			return nil
		default:
			l.Close()
			return fmt.Errorf("receiving plugin reports on %s: %w", l.Path(), err)
		}
	}
}
