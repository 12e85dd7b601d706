package webhookserver

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/webhookcert"
)

// Flags are the settings every webhook takes: the component's, its HTTPS
// address, and where its serving certificate lives and goes.
type Flags struct {
	component.Flags
	Addr string // HTTPS listen address of the webhook
	// Namespace holds the Service and the certificate's Secret.
	Namespace string
	Service   string // the webhook's Service; the certificate names it
	TLSSecret string // Secret holding the CA and serving certificate
	// WebhookConfig is the webhook configuration whose caBundle is kept.
	WebhookConfig string
}

// Register adds the flags to fs with defaults for the webhook name
// (plexus-injector: Service and configuration name, name-tls the Secret)
// serving its admin endpoint on adminAddr.
func (f *Flags) Register(fs *flag.FlagSet, name, adminAddr string) {
	f.Flags.Register(fs, adminAddr)
	fs.StringVar(&f.Addr, "addr", ":8443", "HTTPS address of the webhook")
	fs.StringVar(&f.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "the control plane's namespace")
	fs.StringVar(&f.Service, "service", name, "the webhook's Service")
	fs.StringVar(&f.TLSSecret, "tls-secret", name+"-tls", "Secret holding the webhook's CA and serving certificate")
	fs.StringVar(&f.WebhookConfig, "webhook-config", name, "the webhook configuration whose caBundle is kept")
}

// Validate reports every problem with f.
func (f Flags) Validate() error {
	errs := []error{component.CheckAddr("--addr", f.Addr, false), f.Flags.Validate()}
	for _, n := range []struct{ flag, name string }{
		{"--namespace (or POD_NAMESPACE)", f.Namespace}, {"--service", f.Service},
		{"--tls-secret", f.TLSSecret}, {"--webhook-config", f.WebhookConfig},
	} {
		for _, msg := range validation.IsDNS1123Subdomain(n.name) {
			errs = append(errs, fmt.Errorf("%s %q: %s", n.flag, n.name, msg))
		}
	}
	return errors.Join(errs...)
}

// Cert is the certificate configuration f names, for a validating
// (or else mutating) webhook.
func (f Flags) Cert(validating bool) webhookcert.Config {
	return webhookcert.Config{Namespace: f.Namespace, Service: f.Service, Secret: f.TLSSecret, WebhookConfig: f.WebhookConfig, Validating: validating}
}
