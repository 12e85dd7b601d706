// Package plexusctl is the plexusctl command line, a cobra command tree
// built from control/cli/command (kubectl's global flags, leaf commands,
// usage errors): the commands install, upgrade, uninstall, check, inject,
// uninject, stat, routes, profile, authz, diagnostics, version and cobra's
// completion, the viz extension's tree (viz/cli/vizcmd) added as viz, and
// exit codes 0 (success), 1 (failure) and 2 (usage error: one line naming
// the problem and the --help to read).
package plexusctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/cli/command"
	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/control/cli/optin"
	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/control/cli/uninstall"
	"github.com/plexus-mesh/plexus/control/cli/upgrade"
	"github.com/plexus-mesh/plexus/control/healthcheck"
	"github.com/plexus-mesh/plexus/control/version"
	"github.com/plexus-mesh/plexus/deploy"
	"github.com/plexus-mesh/plexus/multicluster/cli/mccmd"
	"github.com/plexus-mesh/plexus/viz/cli/vizcmd"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitFail  = 1
	ExitUsage = 2
)

// Env is what the command reads from its process.
type Env = command.Env

// Colour is whether to colour what goes to stdout (see command.Colour).
func Colour(stdout io.Writer, getenv func(string) string) bool { return command.Colour(stdout, getenv) }

// root is plexusctl's command tree, with g's flags persistent on every
// command.
func root(g *command.Globals, env Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plexusctl",
		Short: "plexusctl installs, upgrades, checks and observes Plexus",
		Long: `plexusctl installs, upgrades, checks and observes Plexus, the service mesh.

Resources are named as kubectl names them: deploy/web, deploy web,
deployment/web, po/NAME; -n NAMESPACE, -A for every namespace, -l SELECTOR.

Exit codes: 0 success, 1 failure, 2 usage error (a bad flag, argument or
resource; the message says what to run for help).`,
		SilenceErrors: true,
		SilenceUsage:  true,
		// With no command: the help, as a usage error.
		RunE: func(cmd *cobra.Command, args []string) error {
			cmd.SetOut(cmd.ErrOrStderr())
			cmd.Help()
			return command.UsageError{Err: errors.New("no command"), Quiet: true}
		},
	}
	g.Register(cmd.PersistentFlags())
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return command.UsageError{Err: err} })
	cmd.AddCommand(
		installCmd(g, env), upgradeCmd(g, env), uninstallCmd(g, env), checkCmd(g, env),
		optinCmd(optin.Inject, env), optinCmd(optin.Uninject, env),
		statCmd(g, env), routesCmd(g, env), profileCmd(g, env), authzCmd(g, env),
		vizcmd.Command(g, env), mccmd.Command(g, env), diagnosticsCmd(g, env), versionCmd(g, env),
	)
	return cmd
}

// Main runs plexusctl with args (without the program name) and returns the
// exit code.
func Main(ctx context.Context, args []string, env Env) int {
	cmd := root(&command.Globals{}, env)
	if err := singleDashLongFlag(cmd, args); err != nil {
		fmt.Fprintf(env.Stderr, "plexusctl: %v (see plexusctl --help)\n", err)
		return ExitUsage
	}
	cmd.SetArgs(args)
	cmd.SetIn(env.Stdin)
	cmd.SetOut(env.Stdout)
	cmd.SetErr(env.Stderr)
	ran, err := cmd.ExecuteContextC(ctx)
	name := "plexusctl"
	if ran != nil {
		name = ran.CommandPath()
	}
	var ue command.UsageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &ue) && ue.Quiet:
		return ExitUsage
	case errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command"):
		fmt.Fprintf(env.Stderr, "%s: %s (see %s --help)\n", name, strings.Join(strings.Fields(err.Error()), " "), name)
		return ExitUsage
	case errors.Is(err, command.ErrReported):
		return ExitFail
	default:
		fmt.Fprintf(env.Stderr, "%s: %v\n", name, err)
		return ExitFail
	}
}

// singleDashLongFlag refuses -kubeconfig, -namespace and the like, which
// Go's flag package took and pflag reads as shorthands (-namespace: -n
// "amespace").
func singleDashLongFlag(cmd *cobra.Command, args []string) error {
	long := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.Flags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) { long[f.Name] = len(f.Name) > 1 })
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(cmd)
	for _, a := range args {
		if a == "--" {
			return nil
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "-"), "=")
		if strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "--") && long[name] {
			return fmt.Errorf("%s: long flags take two dashes: --%s", a, strings.TrimPrefix(a, "-"))
		}
	}
	return nil
}

func installCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("install", "print the manifests for kubectl apply --server-side -f -", func(fs *pflag.FlagSet) command.RunFunc {
		cfg := install.DefaultConfig()
		settingFlags(fs, &cfg)
		fs.BoolVar(&cfg.CRDsOnly, "crds", false, "print only the CustomResourceDefinitions")
		fs.StringVar(&cfg.TrustAnchorsFile, "identity-trust-anchors-file", "", "PEM trust anchors (with the two issuer files; default: generate new ones)")
		fs.StringVar(&cfg.IssuerCertificateFile, "identity-issuer-certificate-file", "", "PEM issuer certificate, signed by a trust anchor")
		fs.StringVar(&cfg.IssuerKeyFile, "identity-issuer-key-file", "", "PEM issuer private key")
		return func(ctx context.Context, args []string) error {
			if err := command.NoArgs(args, cfg.Validate); err != nil {
				return err
			}
			if !cfg.SkipGatewayAPICRDs {
				omit, err := planGatewayAPI(ctx, "install", g, env)
				if err != nil {
					return err
				}
				cfg.OmitGatewayAPICRDs = omit
			}
			r := install.Renderer{Manifests: deploy.Manifests, Generate: install.GenerateIdentity, Now: time.Now, ReadFile: os.ReadFile}
			return r.Render(cfg, env.Stdout)
		}
	})
}

// connectDynamic is connect with a dynamic client too.
func connectDynamic(g *command.Globals) (kubernetes.Interface, dynamic.Interface, error) {
	client, restCfg, _, err := command.Connect(g)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(restCfg)
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return client, dyn, nil
}

// settingFlags are the install settings that install and upgrade take.
func settingFlags(fs *pflag.FlagSet, cfg *install.Config) {
	fs.StringVar(&cfg.TrustDomain, "trust-domain", cfg.TrustDomain, "SPIFFE trust domain of the mesh")
	fs.StringVar(&cfg.ClusterDomain, "cluster-domain", cfg.ClusterDomain, "the cluster's DNS domain")
	fs.StringVar(&cfg.CNIBinDir, "cni-bin-dir", cfg.CNIBinDir, "host directory of the CNI plugin binaries")
	fs.StringVar(&cfg.CNIConfDir, "cni-conf-dir", cfg.CNIConfDir, "host directory of the CNI configuration")
	fs.BoolVar(&cfg.NodeImageMode, "node-image-mode", cfg.NodeImageMode, "leave out the node agent DaemonSet: the CNI plugin is baked into the node images")
	fs.BoolVar(&cfg.HA, "ha", cfg.HA, "run 3 replicas of each control-plane service, spread over nodes, with PodDisruptionBudgets")
	fs.StringVar(&cfg.ImageRegistry, "image-registry", cfg.ImageRegistry, "registry (and path) of the Plexus images")
	fs.StringVar(&cfg.Version, "version", cfg.Version, "tag of the Plexus images")
	fs.StringVar(&cfg.DefaultInboundPolicy, "default-inbound-policy", cfg.DefaultInboundPolicy, "who may reach meshed pods no Server covers: all-unauthenticated, all-authenticated, cluster-authenticated, cluster-unauthenticated, deny or audit (a namespace or pod annotation config.plexus.dev/default-inbound-policy overrides it)")
	fs.StringVar(&cfg.ClusterNetworks, "cluster-networks", cfg.ClusterNetworks, "the cluster's pod and service networks (comma-separated CIDRs), for the cluster-* inbound policies")
	fs.BoolVar(&cfg.SkipGatewayAPICRDs, "skip-gateway-api-crds", false, "leave out the Gateway API CRDs (HTTPRoute, GRPCRoute) without asking the cluster which it has")
}

// upgradeCmd: the settings of the running install, read back from the
// cluster, with the flags given set over them.
func upgradeCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("upgrade", "upgrade the cluster's Plexus to this version, keeping its settings, trust anchors and issuer; prune what it no longer ships", func(fs *pflag.FlagSet) command.RunFunc {
		given := install.DefaultConfig()
		settingFlags(fs, &given)
		timeout := fs.Duration("timeout", upgrade.DefaultTimeout, "how long the control plane and the node agents may take to roll")
		return func(ctx context.Context, args []string) error {
			if err := command.NoArgs(args, given.Validate); err != nil {
				return err
			}
			client, dyn, err := connectDynamic(g)
			if err != nil {
				return err
			}
			u := upgrade.Upgrader{Client: client, Dynamic: dyn, Renderer: install.Renderer{Manifests: deploy.Manifests, Now: time.Now}, Progress: env.Stderr}
			installed, err := u.Installed(ctx)
			if err != nil {
				return err
			}
			// This build's version, unless --version says otherwise.
			cfg := installed
			cfg.Version = version.Version
			over := pflag.NewFlagSet("installed", pflag.ContinueOnError)
			settingFlags(over, &cfg)
			var setErr error
			fs.Visit(func(f *pflag.Flag) {
				if over.Lookup(f.Name) != nil && setErr == nil {
					setErr = over.Set(f.Name, f.Value.String())
				}
			})
			if setErr != nil {
				return command.UsageError{Err: setErr}
			}
			if err := cfg.Validate(); err != nil {
				return command.UsageError{Err: err}
			}
			if err := upgrade.Check(installed, cfg); err != nil {
				return command.UsageError{Err: err}
			}
			if !cfg.SkipGatewayAPICRDs {
				if cfg.OmitGatewayAPICRDs, err = planGatewayAPI(ctx, "upgrade", g, env); err != nil {
					return err
				}
			}
			return u.Run(ctx, cfg, *timeout)
		}
	})
}

// gatewayAPITimeout bounds the look at the cluster's Gateway API CRDs.
const gatewayAPITimeout = 10 * time.Second

// planGatewayAPI asks the cluster, if one is configured, which Gateway API
// CRDs it has, prints install's notes on stderr and returns the CRDs to
// leave out (control/cli/install's package doc has the rule).
func planGatewayAPI(ctx context.Context, verb string, g *command.Globals, env Env) ([]string, error) {
	_, restCfg, _, err := command.Connect(g)
	var dyn dynamic.Interface
	if err == nil {
		dyn, err = dynamic.NewForConfig(restCfg)
	}
	lookup := func(context.Context, string) (*install.CRDRelease, error) { return nil, err }
	if err == nil {
		lookup = install.ClusterCRDs(dyn)
	}
	ctx, cancel := context.WithTimeout(ctx, gatewayAPITimeout)
	defer cancel()
	plan, err := install.PlanGatewayAPI(ctx, deploy.Manifests, lookup)
	if err != nil {
		return nil, err
	}
	for _, n := range plan.Notes {
		fmt.Fprintf(env.Stderr, "plexusctl %s: %s\n", verb, n)
	}
	return plan.Omit, plan.Err
}

func uninstallCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("uninstall", "remove plexus-cni from every node, then print the rest for kubectl delete -f - (or --delete it)", func(fs *pflag.FlagSet) command.RunFunc {
		cfg := uninstall.Config{Install: install.DefaultConfig()}
		fs.StringVar(&cfg.Install.CNIBinDir, "cni-bin-dir", cfg.Install.CNIBinDir, "host directory of the CNI plugin binaries (used only when the node agent's DaemonSet is gone; otherwise its own)")
		fs.StringVar(&cfg.Install.CNIConfDir, "cni-conf-dir", cfg.Install.CNIConfDir, "host directory of the CNI configuration (likewise)")
		fs.StringVar(&cfg.Install.ImageRegistry, "image-registry", cfg.Install.ImageRegistry, "registry (and path) of the plexus-node image for the cleanup (likewise)")
		fs.StringVar(&cfg.Install.Version, "version", cfg.Install.Version, "tag of the plexus-node image for the cleanup (likewise)")
		fs.BoolVar(&cfg.Install.NodeImageMode, "node-image-mode", false, "the CNI plugin is baked into the node images: leave the nodes alone")
		fs.DurationVar(&cfg.Timeout, "timeout", uninstall.DefaultTimeout, "how long the nodes may take to remove plexus-cni")
		fs.BoolVar(&cfg.Delete, "delete", false, "delete the rest through the API instead of printing it")
		return func(ctx context.Context, args []string) error {
			if err := command.NoArgs(args, cfg.Validate); err != nil {
				return err
			}
			client, dyn, err := connectDynamic(g)
			if err != nil {
				return err
			}
			u := uninstall.Uninstaller{Client: client, Dynamic: dyn, Renderer: install.Renderer{Manifests: deploy.Manifests}, Progress: env.Stderr}
			return u.Run(ctx, cfg, env.Stdout)
		}
	})
}

func checkCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("check", "verify the installation in a cluster", func(fs *pflag.FlagSet) command.RunFunc {
		var cfg healthcheck.Config
		fs.BoolVar(&cfg.NodeImageMode, "node-image-mode", false, "the CNI plugin is baked into the node images: skip the DaemonSet check")
		fs.BoolVar(&cfg.Proxy, "proxy", false, "also check the data plane of -n NAMESPACE (default every namespace): proxy versions, certificates, redirect rules, pods that ask for a proxy and run none")
		timeout := fs.Duration("timeout", 30*time.Second, "give up on the API server after this long")
		return func(ctx context.Context, args []string) error {
			if err := command.NoArgs(args, cfg.Validate); err != nil {
				return err
			}
			clients, restCfg, _, err := connectPolicy(g)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(ctx, *timeout)
			defer cancel()
			cfg.ProxyNamespace = g.Namespace // set only by -n: every namespace by default
			c := healthcheck.Checker{Client: clients.Kube, Policy: clients, Now: time.Now, ServerTime: healthcheck.APIServerTime(restCfg),
				Scrape: healthcheck.Scraper(stat.ProxyScraper(clients.Kube))}
			if !healthcheck.Print(env.Stdout, c.Run(ctx, cfg), env.Colour) {
				return command.ErrReported
			}
			return nil
		}
	})
}

func optinCmd(mode optin.Mode, env Env) *cobra.Command {
	use, short := "inject [FILE|-]...", "add plexus.dev/inject: enabled to manifests (files, or - for stdin)"
	if mode == optin.Uninject {
		use, short = "uninject [FILE|-]...", "remove plexus.dev/inject from manifests (files, or - for stdin)"
	}
	return command.Leaf(use, short, func(*pflag.FlagSet) command.RunFunc {
		return func(_ context.Context, files []string) error {
			if len(files) == 0 {
				files = []string{"-"}
			}
			var out strings.Builder
			for i, f := range files {
				in := env.Stdin
				if f != "-" {
					fh, err := os.Open(f)
					if err != nil {
						return fmt.Errorf("reading manifests: %w", err)
					}
					defer fh.Close()
					in = fh
				}
				var one strings.Builder
				if err := optin.Rewrite(in, &one, mode); err != nil {
					return fmt.Errorf("%s: %w", displayName(f), err)
				}
				if i > 0 && out.Len() > 0 && one.Len() > 0 {
					out.WriteString("---\n")
				}
				out.WriteString(one.String())
			}
			_, err := io.WriteString(env.Stdout, out.String())
			return err
		}
	})
}

func displayName(f string) string {
	if f == "-" {
		return "stdin"
	}
	return f
}
