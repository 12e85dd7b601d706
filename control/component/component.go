// Package component is what every plexus-control subcommand shares: flags
// parsed strictly (no stray arguments, every invalid setting reported), a
// JSON logger, and a Prometheus registry with the Go and process
// collectors. Each subcommand's own package keeps its flags and wiring.
package component

import (
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

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
