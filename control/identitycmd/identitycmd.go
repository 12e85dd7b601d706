// Package identitycmd holds the `plexus-control identity` and
// `plexus-control issuer` subcommands: flag parsing and wiring around
// control/identity and mesh/identity/pki.
package identitycmd

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
	"strings"
	"time"

	"github.com/plexus-mesh/plexus/control/adminhttp"
	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/control/kubeclient"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// Main runs `plexus-control identity` until ctx ends. It logs JSON to stdout.
func Main(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("identity", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var (
		cfg        identity.Config
		addr       = fs.String("addr", ":8080", "gRPC (TLS) listen address of the Identity service")
		adminAddr  = fs.String("admin-addr", ":9990", "listen address of /metrics, /ready and /live")
		kubeconfig = fs.String("kubeconfig", "", "kubeconfig file; empty means in-cluster")
		generate   = fs.Bool("generate-issuer", false, "when the issuer Secret is absent, create a new trust anchor and issuer into it, and the trust anchors ConfigMap "+AnchorsConfigMap+" (a chart installed without identity values)")
	)
	fs.StringVar(&cfg.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the issuer Secret and of this service (default $POD_NAMESPACE)")
	fs.StringVar(&cfg.SecretName, "secret", identity.DefaultSecretName, "issuer Secret (ca.crt, tls.crt, tls.key)")
	fs.StringVar(&cfg.TrustDomain, "trust-domain", spiffe.DefaultTrustDomain, "trust domain of the identities issued")
	fs.DurationVar(&cfg.CertLifetime, "cert-lifetime", identity.DefaultCertLifetime, "lifetime of issued certificates")
	fs.DurationVar(&cfg.ClockSkew, "clock-skew", identity.DefaultClockSkew, "NotBefore backdating of issued certificates")
	reserved := fs.String("reserved-namespaces", strings.Join(identity.DefaultReservedNamespaces, ","),
		"comma-separated namespaces whose service accounts are certified only while a Plexus extension declares them (a ConfigMap plexus-extension-NS in --namespace)")
	if err := component.ParseFlags(fs, args, nil); err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	for _, ns := range strings.Split(*reserved, ",") {
		if ns = strings.TrimSpace(ns); ns != "" {
			cfg.ReservedNamespaces = append(cfg.ReservedNamespaces, ns)
		}
	}
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := component.Logger(stdout, slog.LevelInfo)
	client, err := kubeclient.New(*kubeconfig, "plexus-identity")
	if err != nil {
		return err
	}
	if *generate {
		if err := GenerateIssuer(ctx, client, cfg.Namespace, cfg.SecretName, cfg.TrustDomain, log); err != nil {
			return err
		}
	}
	reg := component.Registry()
	srv, err := identity.New(cfg, identity.Deps{Client: client, Metrics: reg, Log: log})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	adminLn, err := net.Listen("tcp", *adminAddr)
	if err != nil {
		ln.Close()
		return fmt.Errorf("identity admin: %w", err)
	}
	log.Info("identity service starting", "grpc", ln.Addr().String(), "admin", adminLn.Addr().String(),
		"identity", srv.ID().String(), "secret", cfg.Namespace+"/"+cfg.SecretName)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	admin := &http.Server{Handler: adminhttp.Handler(reg, srv.Ready), ReadHeaderTimeout: 10 * time.Second}
	errs := make(chan error, 3)
	go func() { errs <- srv.Run(ctx) }()
	go func() { errs <- srv.Serve(ctx, ln) }()
	go func() {
		err := admin.Serve(adminLn)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		errs <- err
	}()
	var first error
	for i := range 3 {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
		if i == 0 { // the first to end ends the others
			cancel()
			shutdown, done := context.WithTimeout(context.Background(), 5*time.Second)
			admin.Shutdown(shutdown)
			done()
		}
	}
	return first
}
