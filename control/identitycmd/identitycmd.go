// Package identitycmd holds the `plexus-control identity` and
// `plexus-control issuer` subcommands: flag parsing and wiring around
// control/identity and mesh/identity/pki.
package identitycmd

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/identity"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// Main runs `plexus-control identity` until ctx ends. It logs JSON to stdout.
func Main(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("identity", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var (
		cfg      identity.Config
		common   component.Flags
		addr     = fs.String("addr", ":8080", "gRPC (TLS) listen address of the Identity service")
		generate = fs.Bool("generate-issuer", false, "when the issuer Secret is absent, create a new trust anchor and issuer into it, and the trust anchors ConfigMap "+AnchorsConfigMap+" (a chart installed without identity values)")
	)
	common.Register(fs, ":9990")
	fs.StringVar(&cfg.Namespace, "namespace", os.Getenv("POD_NAMESPACE"), "namespace of the issuer Secret and of this service (default $POD_NAMESPACE)")
	fs.StringVar(&cfg.SecretName, "secret", identity.DefaultSecretName, "issuer Secret (ca.crt, tls.crt, tls.key)")
	fs.StringVar(&cfg.TrustDomain, "trust-domain", spiffe.DefaultTrustDomain, "trust domain of the identities issued")
	fs.DurationVar(&cfg.CertLifetime, "cert-lifetime", identity.DefaultCertLifetime, "lifetime of issued certificates")
	fs.DurationVar(&cfg.ClockSkew, "clock-skew", identity.DefaultClockSkew, "NotBefore backdating of issued certificates")
	reserved := fs.String("reserved-namespaces", strings.Join(identity.DefaultReservedNamespaces, ","),
		"comma-separated namespaces whose service accounts are certified only while a Plexus extension declares them (a ConfigMap plexus-extension-NS in --namespace)")
	if err := component.ParseFlags(fs, args, func() error { return common.Validate() }); err != nil {
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
	env, err := common.Start(stdout, "plexus-identity")
	if err != nil {
		return err
	}
	if *generate {
		if err := GenerateIssuer(ctx, env.Kube, cfg.Namespace, cfg.SecretName, cfg.TrustDomain, env.Log); err != nil {
			return err
		}
	}
	srv, err := identity.New(cfg, identity.Deps{Client: env.Kube, Metrics: env.Registry, Log: env.Log})
	if err != nil {
		return err
	}
	lns, err := component.Listen(*addr, common.AdminAddr)
	if err != nil {
		return fmt.Errorf("identity: %w", err)
	}
	env.Log.Info("identity service starting", "grpc", lns[0].Addr().String(), "admin", component.Addr(lns[1]),
		"identity", srv.ID().String(), "secret", cfg.Namespace+"/"+cfg.SecretName)
	return component.Run(ctx,
		component.Part{Name: "identity", Run: srv.Run},
		component.Part{Name: "identity server", Run: func(ctx context.Context) error { return srv.Serve(ctx, lns[0]) }},
		component.Admin(lns[1], env.Registry, srv.Ready))
}
