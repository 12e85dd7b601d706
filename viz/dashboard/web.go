// Package dashboard is the viz extension's dashboard (plexus-control web,
// ARCHITECTURE.md §10): read-only pages of golden metrics by namespace, workload
// and pod with sparklines, a namespace's topology, per-route metrics, the
// control plane's health, and a live tap streamed as Server-Sent Events.
// Pages are html/template with embedded CSS and JavaScript and nothing
// fetched from elsewhere; every response carries a strict
// Content-Security-Policy, and requests for unexpected Host names are
// refused (DNS rebinding).
package dashboard

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/control/routestats"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

// Config is the dashboard's configuration.
type Config struct {
	// AllowedHosts is a regular expression; Host names it matches whole
	// are allowed beside the defaults (DefaultAllowedHosts).
	AllowedHosts string
	// ControlNamespace is where the control plane runs.
	ControlNamespace string
	// Window is the range golden metrics are rated over.
	Window time.Duration
	// SparklineSpan and SparklineStep shape the sparklines.
	SparklineSpan, SparklineStep time.Duration
	// MaxTapStreams bounds the live taps served at once; TapMaxDuration
	// ends each; TapMaxEventRate, in events per second, is asked of the
	// tap service (0: its default).
	MaxTapStreams   int
	TapMaxDuration  time.Duration
	TapMaxEventRate float64
	// QueryTimeout bounds the queries behind one page.
	QueryTimeout time.Duration
}

// DefaultConfig is the configuration plexus-control web starts from.
func DefaultConfig() Config {
	return Config{
		ControlNamespace: healthcheck.Namespace,
		Window:           vizquery.DefaultWindow,
		SparklineSpan:    30 * time.Minute,
		SparklineStep:    30 * time.Second,
		MaxTapStreams:    4,
		TapMaxDuration:   10 * time.Minute,
		QueryTimeout:     20 * time.Second,
	}
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.AllowedHosts != "" {
		if _, err := regexp.Compile(c.AllowedHosts); err != nil {
			errs = append(errs, fmt.Errorf("allowed hosts %q: %w", c.AllowedHosts, err))
		}
	}
	if c.ControlNamespace == "" {
		errs = append(errs, errors.New("control namespace is empty"))
	}
	for name, d := range map[string]time.Duration{"window": c.Window, "sparkline span": c.SparklineSpan, "sparkline step": c.SparklineStep,
		"tap max duration": c.TapMaxDuration, "query timeout": c.QueryTimeout} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s %s: want a positive duration", name, d))
		}
	}
	if c.SparklineStep > 0 && c.SparklineSpan/c.SparklineStep > 1000 {
		errs = append(errs, fmt.Errorf("sparkline span %s over step %s: more than 1000 points", c.SparklineSpan, c.SparklineStep))
	}
	if c.MaxTapStreams < 1 {
		errs = append(errs, fmt.Errorf("max tap streams %d: want at least 1", c.MaxTapStreams))
	}
	if !tapapi.ValidEventRate(c.TapMaxEventRate) {
		errs = append(errs, fmt.Errorf("tap max event rate %g: want 0 (the tap service's default) or %g to %d", c.TapMaxEventRate, tapapi.MinEventRate, tapapi.MaxEventRate))
	}
	return errors.Join(errs...)
}

// Metrics answers the metric pages (a vizquery client: FromPrometheus).
type Metrics interface {
	Golden(ctx context.Context, level vizquery.Level, f vizquery.Filter, window time.Duration) ([]vizquery.Golden, error)
	Sparklines(ctx context.Context, level vizquery.Level, f vizquery.Filter, span, step time.Duration) (map[vizquery.Key]vizquery.Sparklines, error)
	Edges(ctx context.Context, ns string, window time.Duration) ([]vizquery.Edge, error)
	Routes(ctx context.Context, f vizquery.Filter, window time.Duration) ([]routestats.Row, error)
	Health(ctx context.Context) (vizquery.Health, error)
}

type promMetrics struct {
	*vizquery.Client
	kube kubernetes.Interface
}

func (p promMetrics) Edges(ctx context.Context, ns string, window time.Duration) ([]vizquery.Edge, error) {
	return p.Client.Edges(ctx, p.kube, ns, window)
}

// FromPrometheus answers Metrics from Prometheus, finding the sources of
// edges with kube.
func FromPrometheus(c *vizquery.Client, kube kubernetes.Interface) Metrics {
	return promMetrics{Client: c, kube: kube}
}

// TapFunc taps resource/name in ns (tapclient.Stream with the dashboard's
// own credentials), calling fn with each event until ctx ends.
type TapFunc func(ctx context.Context, ns, resource, name string, req tapapi.Request, fn func(tapapi.Event) error) error

// Sources are what the pages show.
type Sources struct {
	Metrics Metrics
	Tap     TapFunc
	// Checks runs plexusctl check's checks (check.Checker.Run).
	Checks func(ctx context.Context) []healthcheck.Result
}

// Server serves the dashboard.
type Server struct {
	cfg     Config
	src     Sources
	log     *slog.Logger
	allowed *regexp.Regexp
	pages   map[string]*pageTemplate
	taps    chan struct{} // one token per live tap
}

// New returns a dashboard of cfg over src.
func New(cfg Config, src Sources, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if src.Metrics == nil || src.Tap == nil || src.Checks == nil {
		return nil, errors.New("web: Metrics, Tap and Checks are all needed")
	}
	s := &Server{cfg: cfg, src: src, log: log, taps: make(chan struct{}, cfg.MaxTapStreams)}
	if cfg.AllowedHosts != "" {
		s.allowed = regexp.MustCompile("^(?:" + cfg.AllowedHosts + ")$")
	}
	var err error
	if s.pages, err = parsePages(); err != nil {
		return nil, err
	}
	return s, nil
}

// Handler serves every page behind the Host check and security headers.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", staticHandler()))
	mux.HandleFunc("GET /{$}", s.namespaces)
	mux.HandleFunc("GET /namespaces/{ns}", s.namespace)
	mux.HandleFunc("GET /namespaces/{ns}/workloads/{kind}/{name}", s.workload)
	mux.HandleFunc("GET /namespaces/{ns}/topology", s.topology)
	mux.HandleFunc("GET /tap", s.tapPage)
	mux.HandleFunc("GET /api/tap", s.tapStream)
	mux.HandleFunc("GET /controlplane", s.controlPlane)
	return s.secure(mux)
}

// NewHTTPServer wraps h with the dashboard's timeouts; a tap stream lifts
// the write timeout for itself.
func NewHTTPServer(addr string, h http.Handler) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
}
