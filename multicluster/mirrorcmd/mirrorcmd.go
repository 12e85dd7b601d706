// Package mirrorcmd is `plexus-control service-mirror`, the multicluster
// extension's service mirror (multicluster/mirror): flags into a Config,
// the API server client, the controller, and its admin endpoint.
package mirrorcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"k8s.io/client-go/dynamic"

	"github.com/plexus-mesh/plexus/control/component"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/multicluster/mirror"
)

// Config is the service mirror's configuration.
type Config struct {
	component.Flags
	// Namespace holds the Links and their credentials Secrets.
	Namespace string
	// RenewAt is the fraction of a link token's lifetime after which the
	// mirror replaces it.
	RenewAt float64
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.Namespace == "" {
		errs = append(errs, errors.New("--namespace is required"))
	}
	if c.RenewAt <= 0 || c.RenewAt >= 1 {
		errs = append(errs, fmt.Errorf("--token-renew-at %v: want a fraction of the token's lifetime, between 0 and 1", c.RenewAt))
	}
	return errors.Join(append(errs, c.Flags.Validate())...)
}

// ParseFlags parses the command line.
func ParseFlags(args []string, out io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("plexus-control service-mirror", flag.ContinueOnError)
	fs.SetOutput(out)
	c.Flags.Register(fs, ":9996")
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		ns = mc.Namespace
	}
	fs.Float64Var(&c.RenewAt, "token-renew-at", mirror.DefaultRenewAt, "replace a link's token after this fraction of its lifetime")
	fs.StringVar(&c.Namespace, "namespace", ns, "namespace of the Links and their credentials Secrets (default $POD_NAMESPACE, else "+mc.Namespace+")")
	return c, component.ParseFlags(fs, args, func() error { return c.Validate() })
}

// Main runs the service mirror until ctx ends.
func Main(ctx context.Context, args []string, out io.Writer) error {
	cfg, env, err := component.Begin(args, out, os.Stderr, "plexus-service-mirror", ParseFlags)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(env.Rest)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	c, err := mirror.New(env.Kube, dyn, cfg.Namespace, env.Registry, env.Log)
	if err != nil {
		return err
	}
	c.RenewAt = cfg.RenewAt
	lns, err := component.Listen(cfg.AdminAddr)
	if err != nil {
		return err
	}
	return component.Run(ctx, component.Part{Name: "service mirror", Run: c.Run}, component.Admin(lns[0], env.Registry, c.Ready))
}
