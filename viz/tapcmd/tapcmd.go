// Package tapcmd runs the tap service: plexus-control tap [flags].
package tapcmd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/webhookcert"
	"github.com/plexus-mesh/plexus/mesh/identity/certify"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/viz/tapservice"
)

// Config is the tap service's command line.
type Config struct {
	component.Flags
	Addr string
	// TLSSecret holds the aggregated API's serving certificate, kept
	// (created, renewed, its CA patched into the APIService) by the
	// service itself.
	TLSSecret         string
	APIService        string
	TrustDomain       string
	ControlNamespace  string // where identity and its trust anchors are
	IdentityAddr      string
	IdentityTokenFile string
	Namespace         string // this pod's
	ServiceAccount    string
}

// Validate names every missing setting.
func (c Config) Validate() error {
	var errs []error
	for _, f := range []struct{ name, v string }{
		{"--addr", c.Addr}, {"--tls-secret", c.TLSSecret}, {"--api-service", c.APIService},
		{"--trust-domain", c.TrustDomain}, {"--control-namespace", c.ControlNamespace},
		{"--identity-addr", c.IdentityAddr}, {"--identity-token-file", c.IdentityTokenFile},
		{"--namespace", c.Namespace}, {"--service-account", c.ServiceAccount},
	} {
		if f.v == "" {
			errs = append(errs, fmt.Errorf("%s is required", f.name))
		}
	}
	return errors.Join(append(errs, c.Flags.Validate())...)
}

// ParseFlags reads the command line.
func ParseFlags(args []string, out io.Writer) (Config, error) {
	var c Config
	fs := flag.NewFlagSet("plexus-control tap", flag.ContinueOnError)
	fs.SetOutput(out)
	fs.StringVar(&c.Addr, "addr", ":8443", "the aggregated API's HTTPS address")
	c.Flags.Register(fs, ":9995")
	fs.StringVar(&c.TLSSecret, "tls-secret", "plexus-tap-tls", "Secret (in --namespace) of the serving certificate, kept by the service")
	fs.StringVar(&c.APIService, "api-service", "v1alpha1.tap.plexus.dev", "the APIService whose caBundle the service keeps")
	fs.StringVar(&c.TrustDomain, "trust-domain", "cluster.local", "the mesh's trust domain")
	fs.StringVar(&c.ControlNamespace, "control-namespace", "plexus-system", "the control plane's namespace (identity, and its trust anchors ConfigMap)")
	fs.StringVar(&c.IdentityAddr, "identity-addr", "plexus-identity.plexus-system.svc.cluster.local:8080", "identity service host:port")
	fs.StringVar(&c.IdentityTokenFile, "identity-token-file", "/var/run/secrets/plexus.dev/identity/token", "service-account token for identity.plexus.dev")
	fs.StringVar(&c.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "this pod's namespace (default $POD_NAMESPACE)")
	fs.StringVar(&c.ServiceAccount, "service-account", "plexus-tap", "this pod's service account")
	return c, component.ParseFlags(fs, args, func() error { return c.Validate() })
}

// Main runs the tap service until ctx ends.
func Main(ctx context.Context, args []string, out io.Writer) error {
	cfg, env, err := component.Begin(args, out, os.Stderr, "plexus-tap", ParseFlags)
	if err != nil {
		return err
	}
	log, kube := env.Log, env.Kube
	auth, err := frontProxy(ctx, kube)
	if err != nil {
		return err
	}
	roots, err := trustAnchors(ctx, kube, cfg.ControlNamespace)
	if err != nil {
		return err
	}
	certs, err := certify.New(certify.Config{
		Addr:         cfg.IdentityAddr,
		ServerID:     spiffe.New(cfg.TrustDomain, cfg.ControlNamespace, "plexus-identity"),
		ID:           spiffe.New(cfg.TrustDomain, cfg.Namespace, cfg.ServiceAccount),
		TokenFile:    cfg.IdentityTokenFile,
		TrustAnchors: roots,
		Log:          log.With("component", "certify"),
	})
	if err != nil {
		return err
	}
	go certs.Run(ctx)
	keeper, err := webhookcert.New(webhookcert.Config{Namespace: cfg.Namespace, Service: "plexus-tap", Secret: cfg.TLSSecret,
		APIService: cfg.APIService, Validity: 365 * 24 * time.Hour, RenewBefore: 30 * 24 * time.Hour, Log: log.With("component", "servingcert")}, kube)
	if err != nil {
		return err
	}
	if err := keeper.Ensure(ctx); err != nil {
		return fmt.Errorf("serving certificate: %w", err)
	}
	go keeper.Run(ctx, time.Hour)
	h := tapservice.New(tapservice.Options{Kube: kube, Auth: auth, Certs: certs, TrustDomain: cfg.TrustDomain, Log: log})
	go refreshFrontProxy(ctx, kube, h, log)
	srv := &http.Server{
		Handler: h,
		TLSConfig: &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: keeper.GetCertificate,
			// Verified by the handler against the aggregation layer's CAs:
			// the kubelet's probes present none.
			ClientAuth: tls.RequestClientCert},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	lns, err := component.Listen(cfg.Addr, cfg.AdminAddr)
	if err != nil {
		return err
	}
	log.Info("tap service serving", "addr", lns[0].Addr().String(), "identity", certs.ID().String())
	return component.Run(ctx, component.HTTP("tap server", lns[0], srv), component.Admin(lns[1], env.Registry, certs.Ready))
}

// frontProxy reads how the API server forwards callers, waiting for the
// ConfigMap a while (it is written at the API server's start).
func frontProxy(ctx context.Context, kube kubernetes.Interface) (*tapservice.FrontProxy, error) {
	var err error
	for range 30 {
		var fp *tapservice.FrontProxy
		if fp, err = readFrontProxy(ctx, kube); err == nil {
			return fp, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
	return nil, err
}

// readFrontProxy reads kube-system/extension-apiserver-authentication once.
func readFrontProxy(ctx context.Context, kube kubernetes.Interface) (*tapservice.FrontProxy, error) {
	cm, err := kube.CoreV1().ConfigMaps("kube-system").Get(ctx, "extension-apiserver-authentication", metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading kube-system/extension-apiserver-authentication: %w", err)
	}
	return tapservice.FrontProxyFromConfigMap(cm.Data)
}

// refreshFrontProxy re-reads how the API server forwards callers every few
// minutes, so that a rotated front-proxy CA is taken without a restart.
func refreshFrontProxy(ctx context.Context, kube kubernetes.Interface, h *tapservice.Handler, log *slog.Logger) {
	component.Every(ctx, 5*time.Minute, func(ctx context.Context) {
		fp, err := readFrontProxy(ctx, kube)
		if err != nil {
			log.Warn("re-reading the API server's front-proxy settings; keeping the last", "err", err)
			return
		}
		h.SetAuth(fp)
	})
}

// trustAnchors reads the mesh's trust anchors from the control plane's
// ConfigMap.
func trustAnchors(ctx context.Context, kube kubernetes.Interface, ns string) (*x509.CertPool, error) {
	const name, key = "plexus-identity-trust-anchors", "ca-bundle.crt"
	cm, err := kube.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading the trust anchors %s/%s: %w", ns, name, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM([]byte(cm.Data[key])) {
		return nil, fmt.Errorf("%s/%s: %s holds no PEM certificate", ns, name, key)
	}
	return pool, nil
}
