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
	"log/slog"
	"net"
	"net/http"
	"os"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/kubeclient"
	"github.com/plexus-mesh/plexus/control/spvalidator"
	"github.com/plexus-mesh/plexus/control/webhookcert"
	"github.com/plexus-mesh/plexus/control/webhookserver"
)

// Path is where the webhook configuration sends reviews.
const Path = "/validate"

// Config is the subcommand's configuration.
type Config struct {
	Addr       string // HTTPS listen address of the webhook
	AdminAddr  string // /metrics, /ready and /live
	Kubeconfig string // empty: in-cluster configuration
	// Namespace holds the Service and the certificate's Secret.
	Namespace string
	Service   string // the webhook's Service; the certificate names it
	TLSSecret string // Secret holding the CA and serving certificate
	// WebhookConfig is the ValidatingWebhookConfiguration whose caBundle
	// is kept.
	WebhookConfig string
	ClusterDomain string // profiles are named <svc>.<ns>.svc.<ClusterDomain>
	LogLevel      slog.Level
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	for _, a := range []struct{ flag, addr string }{{"--addr", c.Addr}, {"--admin-addr", c.AdminAddr}} {
		if _, _, err := net.SplitHostPort(a.addr); err != nil {
			errs = append(errs, fmt.Errorf("%s %q: %w", a.flag, a.addr, err))
		}
	}
	for _, n := range []struct{ flag, name string }{
		{"--namespace (or POD_NAMESPACE)", c.Namespace}, {"--service", c.Service},
		{"--tls-secret", c.TLSSecret}, {"--webhook-config", c.WebhookConfig},
	} {
		for _, msg := range validation.IsDNS1123Subdomain(n.name) {
			errs = append(errs, fmt.Errorf("%s %q: %s", n.flag, n.name, msg))
		}
	}
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
	fs.StringVar(&c.Addr, "addr", ":8443", "HTTPS address of the webhook")
	fs.StringVar(&c.AdminAddr, "admin-addr", ":9997", "address of /metrics, /ready and /live")
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig (in-cluster config when empty)")
	fs.StringVar(&c.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the control plane's namespace")
	fs.StringVar(&c.Service, "service", "plexus-sp-validator", "the webhook's Service")
	fs.StringVar(&c.TLSSecret, "tls-secret", "plexus-sp-validator-tls", "Secret holding the webhook's CA and serving certificate")
	fs.StringVar(&c.WebhookConfig, "webhook-config", "plexus-sp-validator", "ValidatingWebhookConfiguration whose caBundle is kept")
	fs.StringVar(&c.ClusterDomain, "cluster-domain", "cluster.local", "the cluster's DNS domain")
	fs.TextVar(&c.LogLevel, "log-level", slog.LevelInfo, "debug, info, warn or error")
	if err := component.ParseFlags(fs, args, func() error { return c.Validate() }); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Main runs the validator until ctx ends.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	c, err := ParseFlags(args, stderr)
	if err != nil {
		return err
	}
	log := component.Logger(stderr, c.LogLevel)
	client, err := kubeclient.New(c.Kubeconfig, "plexus-sp-validator")
	if err != nil {
		return err
	}
	reg := component.Registry()
	hook := &spvalidator.Webhook{ClusterDomain: c.ClusterDomain, Metrics: spvalidator.NewMetrics(reg), Log: log}
	log.Info("sp-validator starting", "addr", c.Addr, "clusterDomain", c.ClusterDomain)
	return webhookserver.Run(ctx, webhookserver.Config{
		Addr: c.Addr, AdminAddr: c.AdminAddr, Routes: map[string]http.Handler{Path: hook}, Registry: reg, Log: log,
		Cert: webhookcert.Config{
			Namespace: c.Namespace, Service: c.Service, Secret: c.TLSSecret, WebhookConfig: c.WebhookConfig, Validating: true,
		},
	}, client)
}
