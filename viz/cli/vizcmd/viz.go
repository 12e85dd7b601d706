// Package vizcmd is the viz extension's command line, plexusctl viz:
// install and uninstall, allow-scrapes, tap and top (viztap.go), edges,
// routes and stat from the viz Prometheus (vizprom.go), and dashboard.
// plexusctl adds Command to its tree; the commands are built from
// control/cli/command, like the core's.
package vizcmd

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/plexus-mesh/plexus/control/cli/command"
	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/control/cli/kinds"
	"github.com/plexus-mesh/plexus/deploy"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/viz/cli"
	"github.com/plexus-mesh/plexus/viz/cli/browse"
)

// Command is plexusctl viz and its subcommands, for plexusctl to add to
// its tree: g are plexusctl's global flags, env its process streams.
func Command(g *command.Globals, env command.Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "viz",
		Short: "the viz extension: install, tap, top, edges, routes, stat, dashboard",
		Long: "The viz extension (namespace plexus-viz): tap, Prometheus and the dashboard.\n" +
			"Kinds: " + kinds.Hint(kinds.All...) + ".",
		RunE: command.ParentRun,
	}
	cmd.AddCommand(
		vizInstallCmd(env), vizUninstallCmd(env), vizAllowScrapesCmd(g, env),
		vizTapCmd(g, env, false), vizTapCmd(g, env, true),
		vizEdgesCmd(g, env), vizRoutesCmd(g, env), vizStatCmd(g, env), vizDashboardCmd(g, env),
	)
	return cmd
}

func vizInstallCmd(env command.Env) *cobra.Command {
	return command.Leaf("install", "print the viz extension's manifests for kubectl apply -f -", func(fs *pflag.FlagSet) command.RunFunc {
		trustDomain := fs.String("trust-domain", spiffe.DefaultTrustDomain, "the mesh's SPIFFE trust domain (as given to plexusctl install)")
		return func(_ context.Context, args []string) error {
			if err := command.NoArgs(args, func() error { return nil }); err != nil {
				return err
			}
			if err := install.ValidDomain("--trust-domain", *trustDomain); err != nil {
				return command.UsageError{Err: err}
			}
			return vizcli.Renderer{Manifests: deploy.Manifests, TrustDomain: *trustDomain}.Install(env.Stdout)
		}
	})
}

func vizUninstallCmd(env command.Env) *cobra.Command {
	return command.Leaf("uninstall", "print the viz extension's objects for kubectl delete -f - (APIService first)", func(*pflag.FlagSet) command.RunFunc {
		return func(_ context.Context, args []string) error {
			if err := command.NoArgs(args, func() error { return nil }); err != nil {
				return err
			}
			return vizcli.Renderer{Manifests: deploy.Manifests}.Uninstall(env.Stdout)
		}
	})
}

func vizAllowScrapesCmd(g *command.Globals, env command.Env) *cobra.Command {
	return command.Leaf("allow-scrapes", "print the policy that lets Prometheus scrape the proxies of -n NAMESPACE under any default inbound policy", func(fs *pflag.FlagSet) command.RunFunc {
		var nets []string
		for _, n := range vizcli.DefaultScrapeNetworks {
			nets = append(nets, n.String())
		}
		networks := fs.String("networks", strings.Join(nets, ","),
			"comma-separated CIDRs the scrapes may come from. Prometheus is not meshed, so its address is all that tells it apart, and Plexus does not know the cluster's pod networks: the default admits every address. "+
				"Narrow it to the pod network(s) where Prometheus runs; add the nodes' network to keep plexusctl stat, which scrapes through the API server, working")
		return func(_ context.Context, args []string) error {
			var cfg vizcli.ScrapeConfig
			if err := command.NoArgs(args, func() error {
				cfg.Namespace = command.Namespace(g)
				for _, s := range strings.Split(*networks, ",") {
					p, err := netip.ParsePrefix(strings.TrimSpace(s))
					if err != nil {
						return fmt.Errorf("--networks %q: %w", s, err)
					}
					cfg.Networks = append(cfg.Networks, p)
				}
				return cfg.Validate()
			}); err != nil {
				return err
			}
			return vizcli.AllowScrapes(env.Stdout, cfg)
		}
	})
}

func vizDashboardCmd(g *command.Globals, env command.Env) *cobra.Command {
	return command.Leaf("dashboard", "port-forward to the dashboard and open it: dashboard [--port 50750] [--show browser|url|none]", func(fs *pflag.FlagSet) command.RunFunc {
		cfg := browse.Config{Address: browse.DefaultAddress, Port: browse.DefaultPort, Show: browse.ShowBrowser}
		fs.IntVar(&cfg.Port, "port", cfg.Port, "local port to listen on (0: any free one)")
		fs.StringVar(&cfg.Address, "address", cfg.Address, "local address to listen on (the dashboard answers only to localhost and loopback names)")
		fs.StringVar(&cfg.Show, "show", cfg.Show, "browser: print the URL and open it when there is a display; url: print it only; none: print nothing")
		return func(ctx context.Context, args []string) error {
			if err := command.NoArgs(args, cfg.Validate); err != nil {
				return err
			}
			kube, dialer, _, err := command.ConnectPods(g)
			if err != nil {
				return err
			}
			d := browse.Dashboard{Kube: kube, Dial: dialer.Dial, Out: env.Stdout, Err: env.Stderr, Browser: browse.SystemBrowser(os.Getenv)}
			return d.Run(ctx, cfg)
		}
	})
}
