package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/mtls"
	"github.com/plexus-mesh/plexus/mesh/policy/authz"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/admin"
	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/discovery"
	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/sidecar/tap"
)

// MaxTargets bounds distinct target_addr and authority label values per direction.
const MaxTargets = 500

// Identity is the workload identity client (mesh/identity/certify.Client): it
// obtains and renews the proxy's certificate while Run runs, and Ready
// says why there is no valid certificate yet.
type Identity interface {
	mtls.CertSource
	Run(ctx context.Context) error
	Ready() error
}

// NewIdentityFunc builds the identity client for cfg (cfg.IdentityAddr is set).
type NewIdentityFunc func(cfg config.Config, log *slog.Logger) (Identity, error)

// RunOptions configure Run.
type RunOptions struct {
	Config   config.Config
	Log      *slog.Logger
	Registry *prometheus.Registry
	// NewIdentity builds the identity client when Config.IdentityAddr is
	// set; Run fails if it is nil then (identity not wired into the build).
	NewIdentity NewIdentityFunc
	// Destination, when set, replaces the client Run dials at
	// Config.DestinationAddr (over mTLS with the identity's certificate).
	Destination destinationpb.DestinationClient
}

// ErrIdentityNotWired is returned by Run when identity is configured but
// the build provides no way to obtain a certificate.
var ErrIdentityNotWired = errors.New("identity is configured (" + config.EnvIdentityAddr + ") but not wired into this build: no identity client (mesh/identity/certify) constructor was provided")

// Run listens on the inbound, outbound and admin ports of the config and
// serves until ctx ends (SIGTERM in main) or POST /shutdown. It then
// reports not ready, stops accepting, and drains for ShutdownGrace.
// Metrics are registered on the registry. With identity configured, /ready
// stays 503 until the first certificate; with destination configured,
// outbound traffic is routed by discovery. A clean drain returns nil.
func Run(ctx context.Context, ro RunOptions) error {
	cfg, log, reg := ro.Config, ro.Log, ro.Registry
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	ctx, cancelRun := context.WithCancel(ctx)
	defer cancelRun()
	m := metrics.New(reg, MaxTargets)
	var ident Identity
	var resolver Resolver
	var inbound *discovery.Resolver // inbound policies, when they apply
	// built is the proxy once New returned (discovery callbacks may come first).
	var built atomic.Pointer[Proxy]
	if cfg.IdentityEnabled() {
		if ro.NewIdentity == nil {
			return ErrIdentityNotWired
		}
		var err error
		if ident, err = ro.NewIdentity(cfg, log); err != nil {
			return fmt.Errorf("identity client: %w", err)
		}
		if reg != nil {
			reg.MustRegister(certExpiry(ident))
		}
		go func() {
			if err := ident.Run(ctx); err != nil && ctx.Err() == nil {
				log.Error("identity client stopped", "err", err)
			}
		}()
		if cfg.DestinationAddr != "" || ro.Destination != nil {
			client := ro.Destination
			if client == nil {
				cc, err := discovery.Dial(cfg.DestinationAddr, ident, cfg.DestinationServerID())
				if err != nil {
					return err
				}
				defer cc.Close()
				client = destinationpb.NewDestinationClient(cc)
			}
			r := discovery.New(discovery.Options{
				Client: client, Log: log.With("component", "discovery"), Registerer: reg,
				ContextToken: cfg.ContextToken(),
				Instrument:   func(t *routes.Table) { httpproxy.InstrumentRoutes(m, t) },
				Release:      func(t *routes.Table) { httpproxy.ReleaseRoutes(m, t) },
				EndpointsRemoved: func(addrs []netip.AddrPort) {
					if p := built.Load(); p != nil {
						p.EndpointsRemoved(addrs)
					}
				},
				PodNamespace: cfg.PodNamespace, PodName: cfg.PodName,
				InboundChanged: func(port uint16, pol *authz.Policy) {
					if p := built.Load(); p != nil {
						p.Revoke(port, pol)
					}
				},
			})
			if cfg.PodName != "" {
				inbound = r
				r.WatchInbound(cfg.InboundPorts.Ports())
			} else {
				log.Warn("no pod name (" + config.EnvPodName + "): inbound policies do not apply, every client is allowed; re-inject the pod")
			}
			defer r.Close()
			resolver = r
		}
	}
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
			if ident != nil {
				if err := ident.Ready(); err != nil {
					return fmt.Errorf("no certificate yet: %w", err)
				}
			}
			if inbound != nil {
				if err := inbound.InboundReady(); err != nil {
					return err
				}
			}
			return nil // listeners are bound before the admin server starts
		},
		Shutdown: func() { stopOnce.Do(func() { close(stop) }) },
		Endpoints: func() any {
			if r, ok := resolver.(*discovery.Resolver); ok {
				return r.Endpoints()
			}
			return []discovery.EndpointSet{}
		},
	})
	var pols InboundPolicies
	if inbound != nil {
		pols = inbound
		r := inbound
		r.WatchInbound([]uint16{cfg.AdminPort})
		if cfg.RedirectProbePort != 0 {
			r.WatchInbound([]uint16{cfg.RedirectProbePort})
		}
	}
	popts := Options{Config: cfg, Metrics: m, Log: log, Probe: authorizeAdmin(pols, cfg.RedirectProbePort, false, m, adminHandler)}
	if ident != nil {
		popts.Certs = ident
		if cfg.TapPort != 0 {
			popts.Tap = tap.NewHub(reg)
		}
	}
	if resolver != nil {
		popts.Resolver = resolver
	}
	if inbound != nil {
		popts.Inbound = inbound
	}
	p = New(popts)
	built.Store(p)

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

	if popts.Tap != nil {
		ln, err := listen("tap", cfg.TapPort)
		if err != nil {
			return err
		}
		ts := tap.NewServer(tap.ServerOptions{Hub: popts.Tap, Certs: ident, Allowed: cfg.TapID(), Log: log.With("component", "tap")})
		defer ts.Stop()
		go func() {
			if err := tap.Serve(ts, ln); err != nil {
				log.Error("tap server stopped", "err", err)
			}
		}()
	}
	adminSrv := adminServer(authorizeAdmin(pols, cfg.AdminPort, true, m, adminHandler), cfg.AdminIdleTimeout, log)
	lns[2] = capListener(lns[2], cfg.AdminMaxConnections, limitAdmin, m)
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

// certExpiry is identity_cert_expiration_timestamp_seconds (Linkerd's
// name): when the proxy's certificate expires, 0 before it has one.
// plexusctl check --proxy reads it.
func certExpiry(id mtls.CertSource) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "identity_cert_expiration_timestamp_seconds",
		Help: "When the proxy's current certificate expires, in seconds since the Unix epoch (0 before it has one).",
	}, func() float64 {
		cert, err := id.Certificate()
		if err != nil || cert == nil || cert.Leaf == nil {
			return 0
		}
		return float64(cert.Leaf.NotAfter.Unix())
	})
}
