package plexusctl

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/plexus-mesh/plexus/control/cli/command"
	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/control/cli/profile"
	"github.com/plexus-mesh/plexus/control/cli/routesview"
	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/viz/cli"
)

func statCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("stat (ns|deploy|pod)[/NAME] [NAME]", "traffic statistics: stat deploy (every one), stat deploy/web or deploy web [-A] [-l SELECTOR]", func(fs *pflag.FlagSet) command.RunFunc {
		var sel command.Selection
		sel.Register(fs)
		window := fs.Duration("window", 5*time.Second, "time between the two scrapes of each proxy")
		outbound := fs.Bool("outbound", false, "the requests the objects send instead, one row per cluster they went to (CLUSTER: a Link's name, or local)")
		return func(ctx context.Context, pos []string) error {
			res, name, err := stat.ParseKindAndName(pos)
			if err != nil {
				return command.Usagef("%v: want stat (ns|deploy|pod) [NAME], or KIND/NAME", err)
			}
			if err := command.TableOutput(g); err != nil {
				return err
			}
			if err := (stat.Config{Resource: res, Namespace: "any", Window: *window}).Validate(); err != nil {
				return command.UsageError{Err: err}
			}
			client, _, ns, err := command.Connect(g)
			if err != nil {
				return err
			}
			cfg := stat.Config{Resource: res, Name: name, Namespace: sel.NamespaceOf(ns), Outbound: *outbound}
			rows, err := vizcli.ScrapeStat(ctx, client, cfg, *window)
			if err != nil {
				return err
			}
			if sel.Selector != "" {
				if rows, err = vizcli.SelectRows(ctx, client, res, cfg.Namespace, sel.Selector, rows); err != nil {
					return err
				}
			}
			if *outbound {
				return stat.RenderOutbound(env.Stdout, rows, g.Output)
			}
			return stat.Render(env.Stdout, rows, g.Output)
		}
	})
}

func routesCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("routes (ns|deploy|pod)/NAME", "per-route traffic a workload sends: routes deploy/NAME (or ns, pod; -o wide|json)", func(fs *pflag.FlagSet) command.RunFunc {
		window := fs.Duration("window", 5*time.Second, "time between the two scrapes of each proxy")
		return func(ctx context.Context, pos []string) error {
			res, name, err := stat.ParseTarget(pos)
			if err != nil {
				return command.Usagef("%v: want routes (ns|deploy|pod)/NAME or (ns|deploy|pod) NAME", err)
			}
			if err := command.TableOutput(g); err != nil {
				return err
			}
			client, _, ns, err := command.Connect(g)
			if err != nil {
				return err
			}
			cfg := stat.Config{Resource: res, Name: name, Namespace: ns, Window: *window}
			if err := cfg.Validate(); err != nil {
				return command.UsageError{Err: err}
			}
			r := routesview.Routes{Stat: stat.Stat{Client: client, Scrape: stat.ProxyScraper(client), Sleep: stat.Sleep, Now: time.Now}}
			out, err := r.Run(ctx, cfg)
			if err != nil {
				return err
			}
			for _, e := range out.Errors {
				fmt.Fprintf(env.Stderr, "plexusctl routes: left out, not scraped: %s\n", e)
			}
			return routesview.Render(env.Stdout, out.Rows, g.Output)
		}
	})
}

func profileCmd(g *command.Globals, env Env) *cobra.Command {
	return command.Leaf("profile --template SERVICE", "print a ServiceProfile to edit: profile --template SERVICE [-n NAMESPACE]", func(fs *pflag.FlagSet) command.RunFunc {
		tmpl := fs.Bool("template", false, "print a ready-to-edit ServiceProfile for the Service SERVICE")
		clusterDomain := fs.String("cluster-domain", install.DefaultClusterDomain, "the cluster's DNS domain")
		return func(_ context.Context, pos []string) error {
			if !*tmpl || len(pos) != 1 {
				return command.Usagef("want profile --template SERVICE [-n NAMESPACE]")
			}
			return profile.Template(env.Stdout, profile.Params{Service: pos[0], Namespace: command.Namespace(g), ClusterDomain: *clusterDomain})
		}
	})
}
