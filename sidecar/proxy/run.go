package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/sidecar/admin"
	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// MaxTargets bounds distinct target_addr and authority label values per direction.
const MaxTargets = 500

// Run listens on the inbound, outbound and admin ports of cfg and serves
// until ctx ends (SIGTERM in main) or POST /shutdown. It then reports not
// ready, stops accepting, and drains for cfg.ShutdownGrace. Metrics are
// registered on reg. A clean drain returns nil.
func Run(ctx context.Context, cfg config.Config, log *slog.Logger, reg *prometheus.Registry) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	m := metrics.New(reg, MaxTargets)
	var draining atomic.Bool
	stop := make(chan struct{})
	var stopOnce sync.Once
	var p *Proxy
	adminHandler := admin.Handler(admin.Options{
		Gatherer: reg,
		Ready: func() error {
			if draining.Load() {
				return errors.New("shutting down")
			}
			if cfg.RedirectProbePort != 0 && !p.RedirectProbed() {
				return fmt.Errorf("no connection has reached probe port %d through the inbound redirect yet: the pod's iptables rules may be missing", cfg.RedirectProbePort)
			}
			return nil // listeners are bound before the admin server starts
		},
		Shutdown: func() { stopOnce.Do(func() { close(stop) }) },
	})
	p = New(Options{Config: cfg, Metrics: m, Log: log, Probe: adminHandler})

	listen := func(name string, port uint16) (net.Listener, error) {
		ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(int(port))))
		if err != nil {
			return nil, fmt.Errorf("%s listener on port %d: %w", name, port, err)
		}
		return ln, nil
	}
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for _, l := range []struct {
		name string
		port uint16
	}{{metrics.Inbound, cfg.InboundPort}, {metrics.Outbound, cfg.OutboundPort}, {"admin", cfg.AdminPort}} {
		ln, err := listen(l.name, l.port)
		if err != nil {
			return err
		}
		lns = append(lns, ln)
	}

	adminSrv := &http.Server{
		Handler:           adminHandler,
		ReadHeaderTimeout: 5 * time.Second,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	errc := make(chan error, 3)
	go func() { errc <- p.Serve(lns[0], metrics.Inbound) }()
	go func() { errc <- p.Serve(lns[1], metrics.Outbound) }()
	go func() {
		if err := adminSrv.Serve(lns[2]); !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("admin server: %w", err)
		}
	}()
	log.Info("proxy serving", "inbound", cfg.InboundPort, "outbound", cfg.OutboundPort, "admin", cfg.AdminPort)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("signal received; draining", "grace", cfg.ShutdownGrace)
	case <-stop:
		log.Info("shutdown requested; draining", "grace", cfg.ShutdownGrace)
	case runErr = <-errc:
		log.Error("listener failed; shutting down", "err", runErr)
	}
	draining.Store(true)
	sctx, cancel := context.WithTimeout(context.Background(), cfg.ShutdownGrace)
	defer cancel()
	drainErr := p.Shutdown(sctx)
	actx, acancel := context.WithTimeout(context.Background(), time.Second)
	defer acancel()
	adminSrv.Shutdown(actx)
	if runErr != nil {
		return runErr
	}
	if drainErr != nil {
		return fmt.Errorf("drain: connections cut after %s: %w", cfg.ShutdownGrace, drainErr)
	}
	log.Info("drained")
	return nil
}
