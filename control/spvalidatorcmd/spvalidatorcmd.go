// Package spvalidatorcmd is `plexus-control sp-validator`: the admission
// webhook that refuses malformed ServiceProfiles, serving HTTPS with a
// certificate it keeps itself, as the injector does.
package spvalidatorcmd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/spvalidator"
	"github.com/plexus-mesh/plexus/control/webhookserver"
)

// Path is where the webhook configuration sends reviews.
const Path = "/validate"

// Config is the subcommand's configuration.
type Config struct {
	webhookserver.Flags
	ClusterDomain string // profiles are named <svc>.<ns>.svc.<ClusterDomain>
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	errs := []error{c.Flags.Validate()}
	for _, msg := range validation.IsDNS1123Subdomain(c.ClusterDomain) {
		errs = append(errs, fmt.Errorf("--cluster-domain %q: %s", c.ClusterDomain, msg))
	}
	return errors.Join(errs...)
}

// ParseFlags turns args into a validated Config.
func ParseFlags(args []string, output io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("sp-validator", flag.ContinueOnError)
	fs.SetOutput(output)
	c.Flags.Register(fs, "plexus-sp-validator", ":9997")
	fs.StringVar(&c.ClusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain")
	if err := component.ParseFlags(fs, args, func() error { return c.Validate() }); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Main runs the validator until ctx ends.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	c, env, err := component.Begin(args, stderr, stderr, "plexus-sp-validator", ParseFlags)
	if err != nil {
		return err
	}
	hook := &spvalidator.Webhook{ClusterDomain: c.ClusterDomain, Metrics: spvalidator.NewMetrics(env.Registry), Log: env.Log}
	env.Log.Info("sp-validator starting", "addr", c.Addr, "clusterDomain", c.ClusterDomain)
	return webhookserver.Run(ctx, webhookserver.Config{
		Addr: c.Addr, AdminAddr: c.AdminAddr, Routes: map[string]http.Handler{Path: hook}, Registry: env.Registry, Log: env.Log,
		Cert: c.Cert(true),
	}, env.Kube)
}
