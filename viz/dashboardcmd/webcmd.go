// Package dashboardcmd is the `plexus-control web` subcommand: it parses flags
// into a Config, connects to the cluster and to the viz extension's
// Prometheus, and serves the dashboard (viz/dashboard) and an admin
// endpoint (/metrics, /ready, /live).
package dashboardcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/dynamic"
	gateway "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/control/inboundpolicy"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/viz/dashboard"
	"github.com/plexus-mesh/plexus/viz/tapclient"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

// DefaultAddr is where the dashboard listens: the pod's loopback, which
// only a port-forward reaches (plexusctl viz dashboard). On any other
// address any pod that can reach it reads every namespace's metrics and
// live requests with the dashboard's rights: its Host check keeps out
// browsers (DNS rebinding), not clients, who choose their own Host.
const DefaultAddr = "127.0.0.1:8084"

// Config is the subcommand's configuration.
type Config struct {
	component.Flags
	Addr          string // dashboard listen address
	PrometheusURL string
	// NodeImageMode skips the node agent DaemonSet in the health checks.
	NodeImageMode bool
	Web           dashboard.Config
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	errs := []error{component.CheckAddr("--addr", c.Addr, false), c.Flags.Validate()}
	if u, err := url.Parse(c.PrometheusURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		errs = append(errs, fmt.Errorf("--prometheus-url %q: want an http(s) URL", c.PrometheusURL))
	}
	if err := c.Web.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ParseFlags turns args into a validated Config.
func ParseFlags(args []string, output io.Writer) (Config, error) {
	cfg := Config{Web: dashboard.DefaultConfig()}
	fs := flag.NewFlagSet("web", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&cfg.Addr, "addr", DefaultAddr, "listen address of the dashboard; keep it on loopback (reached by port-forward): its pages and live tap carry the dashboard's cluster-wide rights, unauthenticated")
	cfg.Flags.Register(fs, ":9994")
	fs.StringVar(&cfg.PrometheusURL, "prometheus-url", vizquery.DefaultURL, "the viz extension's Prometheus")
	fs.StringVar(&cfg.Web.ControlNamespace, "control-namespace", cfg.Web.ControlNamespace, "namespace of the control plane")
	fs.StringVar(&cfg.Web.AllowedHosts, "allowed-hosts", "", "regular expression of further Host names the dashboard answers to (matched whole, any port), besides localhost, 127.0.0.1 and [::1]")
	fs.IntVar(&cfg.Web.MaxTapStreams, "max-tap-streams", cfg.Web.MaxTapStreams, "live taps served at once")
	fs.DurationVar(&cfg.Web.TapMaxDuration, "tap-max-duration", cfg.Web.TapMaxDuration, "a live tap ends after this long")
	fs.Float64Var(&cfg.Web.TapMaxEventRate, "tap-max-rate", cfg.Web.TapMaxEventRate, "events per second a live tap asks the tap service for (0: its default)")
	fs.DurationVar(&cfg.Web.Window, "window", cfg.Web.Window, "range golden metrics are rated over")
	fs.BoolVar(&cfg.NodeImageMode, "node-image-mode", false, "the CNI plugin is baked into the node images: skip the DaemonSet check")
	if err := component.ParseFlags(fs, args, func() error { return cfg.Validate() }); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Main runs `plexus-control web` with args (without the subcommand
// name) until ctx ends.
func Main(ctx context.Context, args []string, stdout io.Writer) error {
	cfg, env, err := component.Begin(args, stdout, stdout, "plexus-web", ParseFlags)
	if err != nil {
		return err
	}
	log := env.Log.With("component", "web")
	src, err := connect(cfg, env)
	if err != nil {
		return err
	}
	s, err := dashboard.New(cfg.Web, src, log)
	if err != nil {
		return err
	}
	return serve(ctx, cfg, env.Registry, s.Handler(), log)
}

// connect builds the dashboard's sources: Prometheus, the tap service
// through the API server and the health checks, all with the dashboard's
// own credentials.
func connect(cfg Config, env component.Env) (dashboard.Sources, error) {
	rc, kube := env.Rest, env.Kube
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return dashboard.Sources{}, fmt.Errorf("dynamic client: %w", err)
	}
	gw, err := gateway.NewForConfig(rc)
	if err != nil {
		return dashboard.Sources{}, fmt.Errorf("gateway API client: %w", err)
	}
	prom, err := vizquery.New(cfg.PrometheusURL, nil)
	if err != nil {
		return dashboard.Sources{}, err
	}
	checker := healthcheck.Checker{Client: kube, Policy: inboundpolicy.Clients{Kube: kube, Dynamic: dyn, Gateway: gw}, Now: time.Now, ServerTime: healthcheck.APIServerTime(rc)}
	checkCfg := healthcheck.Config{NodeImageMode: cfg.NodeImageMode}
	return dashboard.Sources{
		Metrics: dashboard.FromPrometheus(prom, kube),
		Tap: func(ctx context.Context, ns, resource, name string, req tapapi.Request, fn func(tapapi.Event) error) error {
			return tapclient.Stream(ctx, rc, ns, resource, name, req, fn)
		},
		Checks: func(ctx context.Context) []healthcheck.Result { return checker.Run(ctx, checkCfg) },
	}, nil
}

// serve runs the dashboard and the admin endpoint until ctx ends.
func serve(ctx context.Context, cfg Config, reg *prometheus.Registry, h http.Handler, log *slog.Logger) error {
	lns, err := component.Listen(cfg.Addr, cfg.AdminAddr)
	if err != nil {
		return err
	}
	srv := dashboard.NewHTTPServer(cfg.Addr, h)
	srv.BaseContext = func(net.Listener) context.Context { return ctx } // live taps end with the server
	if ap, err := netip.ParseAddrPort(lns[0].Addr().String()); err != nil || !ap.Addr().IsLoopback() {
		log.Warn("the dashboard listens beyond loopback: any client that reaches it reads every namespace's metrics and live requests with its rights", "addr", lns[0].Addr().String())
	}
	log.Info("serving", "addr", lns[0].Addr().String(), "admin_addr", component.Addr(lns[1]), "prometheus", cfg.PrometheusURL,
		"allowed_hosts", cfg.Web.AllowedHosts, "max_tap_streams", cfg.Web.MaxTapStreams)
	return component.Run(ctx, component.HTTP("web server", lns[0], srv), component.Admin(lns[1], reg))
}
