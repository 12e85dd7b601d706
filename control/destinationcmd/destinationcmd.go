// Package destinationcmd is the `plexus-control destination` subcommand: it parses
// flags into a Config, connects to the cluster, and serves the Destination
// gRPC API and an admin endpoint (/metrics, /ready, /live).
package destinationcmd

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	gateway "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/control/destination"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
)

// Config is the subcommand's configuration.
type Config struct {
	component.Flags
	Addr        string // gRPC listen address
	Destination destination.Config
	// Identity, when Identity.Addr is set, is where the server gets its
	// own certificate; without it the API is served in plaintext.
	Identity IdentityConfig
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	return errors.Join(component.CheckAddr("--addr", c.Addr, false), c.Flags.Validate(), c.Destination.Validate(), c.Identity.Validate())
}

// Options are hooks for the caller (the plexus-control main).
type Options struct {
	// ServerTLS returns the gRPC server's TLS configuration (TLS 1.3 with
	// the destination's certificate, e.g. from a mesh/identity/certify client;
	// use GetCertificate so renewed certificates are picked up). It is
	// called once at start. Nil: the server speaks plaintext and logs a
	// warning saying so.
	ServerTLS func() (*tls.Config, error)
	// Ready, if set, is also consulted by /ready (e.g. the certify client's
	// Ready: no certificate yet means not ready).
	Ready func() error
}

// Main runs `plexus-control destination` with args (without the
// subcommand name) until ctx ends, without TLS hooks.
func Main(ctx context.Context, args []string, stdout io.Writer) error {
	return Run(ctx, args, stdout, Options{})
}

// ParseFlags turns args into a validated Config.
func ParseFlags(args []string, output io.Writer) (Config, error) {
	cfg := Config{Destination: destination.DefaultConfig()}
	fs := flag.NewFlagSet("destination", flag.ContinueOnError)
	fs.SetOutput(output)
	fs.StringVar(&cfg.Addr, "addr", ":8086", "gRPC listen address of the Destination API")
	cfg.Flags.Register(fs, ":9996")
	fs.StringVar(&cfg.Destination.ClusterDomain, "cluster-domain", cfg.Destination.ClusterDomain, "cluster DNS domain of service names")
	fs.StringVar(&cfg.Destination.TrustDomain, "trust-domain", cfg.Destination.TrustDomain, "trust domain of endpoint identities")
	fs.StringVar(&cfg.Destination.RemoteClustersNamespace, "remote-clusters-namespace", cfg.Destination.RemoteClustersNamespace,
		"namespace of the linked clusters' credentials Secrets (the multicluster extension's), watched while it exists; \"\" turns remote discovery off")
	fs.IntVar(&cfg.Destination.QueueSize, "queue-size", cfg.Destination.QueueSize, "updates queued per stream before it is ended as too slow")
	fs.Func("default-inbound-policy", fmt.Sprintf("inbound policy of a pod port no Server selects, unless its pod or namespace is annotated %s: one of %v (default %s)",
		destination.AnnotationDefaultInboundPolicy, policyv1alpha1.AccessPolicies(), cfg.Destination.DefaultInboundPolicy), func(v string) error {
		cfg.Destination.DefaultInboundPolicy = policyv1alpha1.AccessPolicy(v)
		return nil // Validate names what is wrong
	})
	fs.Func("cluster-networks", fmt.Sprintf("comma-separated CIDRs of the cluster's pod and node networks, the clients of cluster-* inbound policies (default %s)",
		prefixList(cfg.Destination.ClusterNetworks)), func(v string) error {
		nets, err := parsePrefixes(v)
		cfg.Destination.ClusterNetworks = nets
		return err
	})
	fs.IntVar(&cfg.Destination.MaxStreamsPerIdentity, "max-streams-per-identity", cfg.Destination.MaxStreamsPerIdentity,
		"streams one mesh identity (every proxy of a service account together) may have open at once; more are refused with ResourceExhausted")
	fs.IntVar(&cfg.Destination.MaxLoopbackStreams, "max-loopback-streams", cfg.Destination.MaxLoopbackStreams,
		"streams all callers on loopback without a client certificate (port-forwards, e.g. plexusctl diagnostics endpoints) may have open at once together")
	cfg.Identity.flags(fs)
	lease := &cfg.Destination.StatusLease
	fs.StringVar(&lease.Name, "status-lease", destination.DefaultStatusLease,
		"the Lease the replicas elect the one that writes route status with (\"\": no election, this replica writes)")
	fs.StringVar(&lease.Namespace, "status-lease-namespace", os.Getenv("POD_NAMESPACE"),
		"namespace of --status-lease (default $POD_NAMESPACE; empty: no election)")
	lease.Identity, _ = os.Hostname() // the pod's name
	if err := component.ParseFlags(fs, args, func() error {
		if lease.Namespace == "" {
			lease.Name = "" // run outside a pod: the one replica writes
		}
		return cfg.Validate()
	}); err != nil {
		return Config{}, err
	}
	return cfg, nil
}

// Run is Main with hooks.
func Run(ctx context.Context, args []string, stdout io.Writer, opts Options) error {
	cfg, env, err := component.Begin(args, stdout, stdout, "plexus-destination", ParseFlags)
	if err != nil {
		return err
	}
	log := env.Log.With("component", "destination")
	if l := cfg.Destination.StatusLease; l.Name != "" {
		log.Info("route status: written by the replica that holds the lease", "lease", l.Namespace+"/"+l.Name, "identity", l.Identity)
	} else {
		log.Info("route status: no leader election (no --status-lease or no namespace for it); this replica writes")
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Identity.Addr != "" && opts.ServerTLS == nil {
		certs, err := cfg.Identity.client(cfg.Destination.TrustDomain, log)
		if err != nil {
			return err
		}
		go certs.Run(ctx)
		opts.ServerTLS = func() (*tls.Config, error) { return serverTLS(certs), nil }
		opts.Ready = certs.Ready
	}
	if opts.ServerTLS == nil {
		// Without TLS no caller proves an identity (its proxies have none
		// either): checking would refuse every proxy.
		cfg.Destination.VerifyInboundCaller = false
		cfg.Destination.RequireCallerIdentity = false
		log.Warn("no TLS: destination cannot check callers' identities; it answers anyone (GetInboundPolicy too), bounding streams per address")
	}
	srv, err := destination.New(cfg.Destination, env.Kube, env.Registry, log)
	if err != nil {
		return err
	}
	if err := watchRoutes(srv, env.Rest); err != nil {
		return err
	}

	var tlsCfg *tls.Config
	if opts.ServerTLS != nil {
		if tlsCfg, err = opts.ServerTLS(); err != nil {
			return fmt.Errorf("server TLS configuration: %w", err)
		}
	} else {
		log.Warn("no TLS configured: serving the Destination API in PLAINTEXT", "addr", cfg.Addr)
	}
	lns, err := component.Listen(cfg.Addr, cfg.AdminAddr)
	if err != nil {
		return err
	}
	log.Info("serving", "addr", lns[0].Addr().String(), "admin_addr", component.Addr(lns[1]),
		"cluster_domain", cfg.Destination.ClusterDomain, "trust_domain", cfg.Destination.TrustDomain,
		"default_inbound_policy", cfg.Destination.DefaultInboundPolicy, "cluster_networks", prefixList(cfg.Destination.ClusterNetworks),
		"verify_inbound_caller", cfg.Destination.VerifyInboundCaller, "require_caller_identity", cfg.Destination.RequireCallerIdentity,
		"max_streams_per_identity", cfg.Destination.MaxStreamsPerIdentity, "max_loopback_streams", cfg.Destination.MaxLoopbackStreams)
	return component.Run(ctx,
		component.Part{Name: "destination", Run: srv.Run},
		component.GRPC("destination server", lns[0], grpcServer(srv, tlsCfg)),
		component.Admin(lns[1], env.Registry, srv.Ready, opts.Ready))
}

// grpcServer is the Destination API's gRPC server: over tlsCfg (nil:
// plaintext), with srv's caller interceptor (identities, loopback, stream
// bounds; see destination.Server.StreamInterceptor).
func grpcServer(srv *destination.Server, tlsCfg *tls.Config) *grpc.Server {
	opts := []grpc.ServerOption{
		grpc.ChainStreamInterceptor(srv.StreamInterceptor()),
		// Proxies ping every 30 s to notice a lost connection; allow it.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 20 * time.Second}),
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	gs := grpc.NewServer(opts...)
	pb.RegisterDestinationServer(gs, srv)
	return gs
}

// watchRoutes connects the server's route side (Gateway API routes,
// ServiceProfiles) and its inbound side (policy.plexus.dev), with
// discovery to tell which of their CRDs exist.
func watchRoutes(srv *destination.Server, rc *rest.Config) error {
	gw, err := gateway.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("gateway API client: %w", err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("dynamic client: %w", err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		return fmt.Errorf("discovery client: %w", err)
	}
	c := destination.RouteClients{Gateway: gw, Dynamic: dyn, Discovery: disc}
	if err := srv.WatchRoutes(c); err != nil {
		return err
	}
	return srv.WatchInbound(c)
}

// parsePrefixes reads a comma-separated list of CIDRs.
func parsePrefixes(v string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range strings.Split(v, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("%q: want a CIDR: %w", s, err)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%q: host bits set (want %s)", s, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
