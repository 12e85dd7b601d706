// Package gatewaycmd is `plexus-control gateway`, the multicluster
// extension's gateway (multicluster/gateway): flags into a Config, the API
// server client, the targets it may reach, the gateway port and its admin
// endpoint.
package gatewaycmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/multicluster/gateway"
)

// Config is the gateway's configuration.
type Config struct {
	component.Flags
	// Addr is the gateway port's listen address.
	Addr string
	// HeaderTimeout bounds the wait for a connection's header.
	HeaderTimeout time.Duration
	// MaxConnections and PerSource bound the connections held.
	MaxConnections, PerSource int
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if err := component.CheckAddr("--addr", c.Addr, false); err != nil {
		errs = append(errs, err)
	}
	if c.HeaderTimeout <= 0 {
		errs = append(errs, fmt.Errorf("--header-timeout %v: want a positive duration", c.HeaderTimeout))
	}
	if c.MaxConnections <= 0 || c.PerSource <= 0 || c.PerSource > c.MaxConnections {
		errs = append(errs, fmt.Errorf("--max-connections %d, --max-connections-per-source %d: want 0 < per source <= max", c.MaxConnections, c.PerSource))
	}
	return errors.Join(append(errs, c.Flags.Validate())...)
}

// ParseFlags parses the command line.
func ParseFlags(args []string, out io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("plexus-control gateway", flag.ContinueOnError)
	fs.SetOutput(out)
	c.Flags.Register(fs, ":9993")
	fs.StringVar(&c.Addr, "addr", ":4180", "the gateway port: linked clusters' proxies connect here")
	fs.DurationVar(&c.HeaderTimeout, "header-timeout", gateway.DefaultHeaderTimeout, "a connection's header must arrive within this")
	fs.IntVar(&c.MaxConnections, "max-connections", gateway.DefaultMaxConnections, "connections held at most, in all")
	fs.IntVar(&c.PerSource, "max-connections-per-source", gateway.DefaultPerSource, "connections held at most from one address (a linked cluster may masquerade all its proxies to one)")
	return c, component.ParseFlags(fs, args, func() error { return c.Validate() })
}

// Main runs the gateway until ctx ends.
func Main(ctx context.Context, args []string, out io.Writer) error {
	cfg, env, err := component.Begin(args, out, os.Stderr, "plexus-gateway", ParseFlags)
	if err != nil {
		return err
	}
	targets, err := gateway.NewTargets(env.Kube)
	if err != nil {
		return err
	}
	g, err := gateway.New(gateway.Options{
		Allowed: targets.Allowed, Ready: targets.Ready, HeaderTimeout: cfg.HeaderTimeout,
		MaxConnections: cfg.MaxConnections, PerSource: cfg.PerSource,
		Registry: env.Registry, Log: env.Log,
	})
	if err != nil {
		return err
	}
	lns, err := component.Listen(cfg.Addr, cfg.AdminAddr)
	if err != nil {
		return err
	}
	return component.Run(ctx,
		component.Part{Name: "gateway targets", Run: targets.Run},
		component.Part{Name: "gateway", Run: func(ctx context.Context) error { return g.Serve(ctx, lns[0]) }},
		component.Admin(lns[1], env.Registry, targets.Ready))
}
