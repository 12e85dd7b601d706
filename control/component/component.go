// Package component runs a plexus-control subcommand: the flags every
// component takes (admin address, kubeconfig, log level), parsed strictly
// (no stray arguments, every invalid setting reported); what it starts
// with (a JSON logger, an API client, a Prometheus registry with the Go
// and process collectors); its admin endpoint; and its parts (servers,
// watch loops) run together and stopped together. Each subcommand's own
// package keeps its own flags and wiring.
package component

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/control/kubeclient"
)

// Flags are the settings every component takes.
type Flags struct {
	AdminAddr  string // /metrics, /ready and /live; empty: none
	Kubeconfig string // empty: in-cluster configuration
	LogLevel   slog.Level
}

// Register adds --admin-addr (default adminAddr), --kubeconfig and
// --log-level to fs.
func (f *Flags) Register(fs *flag.FlagSet, adminAddr string) {
	fs.StringVar(&f.AdminAddr, "admin-addr", adminAddr, "listen address of /metrics, /ready and /live; empty: none")
	fs.StringVar(&f.Kubeconfig, "kubeconfig", "", "kubeconfig file; empty: in-cluster configuration")
	fs.TextVar(&f.LogLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
}

// Validate reports a malformed admin address.
func (f Flags) Validate() error {
	return CheckAddr("--admin-addr", f.AdminAddr, true)
}

// CheckAddr reports a listen address that is not host:port, naming its
// flag; empty is allowed when optional.
func CheckAddr(flag, addr string, optional bool) error {
	if addr == "" && optional {
		return nil
	}
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return fmt.Errorf("%s %q: %w", flag, addr, err)
	}
	return nil
}

// Env is what a component starts with.
type Env struct {
	Log      *slog.Logger
	Rest     *rest.Config // the API server, as the component's user agent
	Kube     kubernetes.Interface
	Registry *prometheus.Registry // with the Go and process collectors
}

// Start builds the Env: a JSON logger writing to w at f's level, a client
// of the API server that f's kubeconfig (or the pod's service account)
// names, as userAgent, and a registry.
func (f Flags) Start(w io.Writer, userAgent string) (Env, error) {
	rc, err := kubeclient.Config(f.Kubeconfig, userAgent)
	if err != nil {
		return Env{}, err
	}
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return Env{}, fmt.Errorf("kubernetes client: %w", err)
	}
	return Env{Log: Logger(w, f.LogLevel), Rest: rc, Kube: kube, Registry: Registry()}, nil
}

// Begin is how a component's Main begins: parse its flags from args
// (parse writes usage and flag errors to out), then Start its Env, as
// userAgent, logging to logs.
func Begin[C interface {
	Start(w io.Writer, userAgent string) (Env, error)
}](args []string, out, logs io.Writer, userAgent string, parse func([]string, io.Writer) (C, error)) (C, Env, error) {
	cfg, err := parse(args, out)
	if err != nil {
		return cfg, Env{}, err
	}
	env, err := cfg.Start(logs, userAgent)
	return cfg, env, err
}

// ParseFlags parses args into fs, refuses positional arguments, then runs
// validate (nil: none) and wraps what it reports as an invalid
// configuration. Pass validate as a closure over the config the flags
// write (func() error { return cfg.Validate() }): a method value
// cfg.Validate would copy cfg before the flags are parsed.
func ParseFlags(fs *flag.FlagSet, args []string, validate func() error) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if validate == nil {
		return nil
	}
	if err := validate(); err != nil {
		return fmt.Errorf("invalid configuration: %w", err)
	}
	return nil
}

// Logger is the JSON logger a component writes to w at level.
func Logger(w io.Writer, level slog.Level) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level}))
}

// Registry is a Prometheus registry holding the Go runtime and process
// collectors, for a component's /metrics.
func Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}
