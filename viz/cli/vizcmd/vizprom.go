package vizcmd

// plexusctl viz edges, routes and stat: answers from the viz Prometheus.

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/cli/command"
	"github.com/plexus-mesh/plexus/control/cli/kinds"
	"github.com/plexus-mesh/plexus/control/cli/routesview"
	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/viz/cli"
	"github.com/plexus-mesh/plexus/viz/cli/edges"
	"github.com/plexus-mesh/plexus/viz/cli/promstat"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

// minPromWindow is the least window of a rate from Prometheus: it
// scrapes every 10 s, and a rate needs two scrapes.
const minPromWindow = 20 * time.Second

// connectPrometheus checks window, connects, and returns the viz
// Prometheus, or an error saying how to get it (and without, what to do
// instead) when the extension is not installed.
func connectPrometheus(ctx context.Context, g *command.Globals, window time.Duration, without string) (kubernetes.Interface, *vizquery.Client, string, error) {
	if window < minPromWindow {
		return nil, nil, "", command.Usagef("--window %s: Prometheus scrapes every 10s, want at least %s", window, minPromWindow)
	}
	kube, restCfg, ns, err := command.Connect(g)
	if err != nil {
		return nil, nil, "", err
	}
	ok, err := vizquery.Installed(ctx, kube)
	if err != nil {
		return nil, nil, "", err
	}
	if !ok {
		return nil, nil, "", fmt.Errorf("the viz extension is not installed (plexusctl viz install | kubectl apply -f -)%s", without)
	}
	prom, err := vizcli.Prometheus(restCfg)
	return kube, prom, ns, err
}

func vizEdgesCmd(g *command.Globals, env command.Env) *cobra.Command {
	return command.Leaf("edges [KIND]", "who talks to whom, secured or not: edges [deploy|sts|ds|...] [-n NAMESPACE | -A] [-o wide|json]", func(fs *pflag.FlagSet) command.RunFunc {
		var sel command.Selection
		fs.BoolVarP(&sel.All, "all-namespaces", "A", false, "every namespace")
		window := fs.Duration("window", vizquery.DefaultWindow, "how far back traffic counts (at least two scrape intervals, 20s)")
		return func(ctx context.Context, pos []string) error {
			var kind vizcli.Kind
			var err error
			switch len(pos) {
			case 0:
			case 1:
				if kind, err = kinds.Parse(pos[0]); err != nil {
					return command.Usagef("%v: want viz edges [KIND] [-n NAMESPACE | -A]", err)
				}
				if kind == vizcli.Pods || kind == vizcli.Namespaces || kind == vizcli.Services {
					return command.Usagef("edges are between workloads (deploy, sts, ds, ...): a client is known by its mesh identity, which names its service account, not its pod")
				}
			default:
				return command.Usagef("want viz edges [KIND] [-n NAMESPACE | -A], got %q", strings.Join(pos, " "))
			}
			if err := command.TableOutput(g); err != nil {
				return err
			}
			kube, prom, ns, err := connectPrometheus(ctx, g, *window, "")
			if err != nil {
				return err
			}
			nss := []string{ns}
			if sel.All {
				objs, err := vizcli.Select(ctx, kube, vizcli.Namespaces, "", "")
				if err != nil {
					return err
				}
				nss = nss[:0]
				for _, o := range objs {
					nss = append(nss, o.Name)
				}
			}
			var lists [][]vizquery.Edge
			for _, n := range nss {
				es, err := prom.Edges(ctx, kube, n, *window)
				if err != nil {
					return err
				}
				lists = append(lists, es)
			}
			return edges.Render(env.Stdout, edges.Filter(edges.Merge(lists...), kind), g.Output, kind == "")
		}
	})
}

func vizRoutesCmd(g *command.Globals, env command.Env) *cobra.Command {
	return command.Leaf("routes KIND/NAME", "per-route traffic from Prometheus: routes deploy/web (or ns, pod, sts, ...)", func(fs *pflag.FlagSet) command.RunFunc {
		window := fs.Duration("window", vizquery.DefaultWindow, "the window rates are computed over (at least 20s)")
		return func(ctx context.Context, pos []string) error {
			t, err := vizcli.ParseTarget(pos, true)
			if err != nil {
				return command.Usagef("%v: want viz routes KIND/NAME (deploy/web, ns/shop, po/web-1, ...)", err)
			}
			if t.Kind == vizcli.Services {
				return command.Usagef("routes are counted by the clients' proxies: name the client (deploy/web), not the service")
			}
			if err := command.TableOutput(g); err != nil {
				return err
			}
			_, prom, ns, err := connectPrometheus(ctx, g, *window, "; plexusctl routes measures without it")
			if err != nil {
				return err
			}
			rows, err := promstat.Routes(ctx, prom, promstat.RouteFilter(t, ns), *window)
			if err != nil {
				return err
			}
			return routesview.Render(env.Stdout, rows, g.Output)
		}
	})
}

func vizStatCmd(g *command.Globals, env command.Env) *cobra.Command {
	return command.Leaf("stat (ns|deploy|pod)[/NAME] [NAME]", "traffic statistics from Prometheus (scraping the proxies when viz is not installed): stat deploy, stat deploy/web", func(fs *pflag.FlagSet) command.RunFunc {
		var sel command.Selection
		sel.Register(fs)
		window := fs.Duration("window", 0, "the window: rates over it from Prometheus (default 1m, at least 20s); the time between the two scrapes of each proxy without viz (default 5s)")
		return func(ctx context.Context, pos []string) error {
			res, name, err := stat.ParseKindAndName(pos)
			if err != nil {
				return command.Usagef("%v: want viz stat (ns|deploy|pod) [NAME] [-n NAMESPACE | -A] [-l SELECTOR]", err)
			}
			cfg := stat.Config{Resource: res, Name: name}
			if err := command.TableOutput(g); err != nil {
				return err
			}
			kube, restCfg, ns, err := command.Connect(g)
			if err != nil {
				return err
			}
			cfg.Namespace = sel.NamespaceOf(ns)
			installed, err := vizquery.Installed(ctx, kube)
			if err != nil {
				return err
			}
			var rows []stat.Row
			if installed {
				w := *window
				if w == 0 {
					w = vizquery.DefaultWindow
				}
				if w < minPromWindow {
					return command.Usagef("--window %s: Prometheus scrapes every 10s, want at least %s", w, minPromWindow)
				}
				prom, err := vizcli.Prometheus(restCfg)
				if err != nil {
					return err
				}
				if rows, err = (promstat.Stat{Kube: stat.Stat{Client: kube}, Prom: prom, Window: w}).Run(ctx, cfg); err != nil {
					return err
				}
			} else {
				fmt.Fprintln(env.Stderr, "plexusctl viz stat: the viz extension is not installed: scraping the proxies through the API server instead (as plexusctl stat)")
				if rows, err = vizcli.ScrapeStat(ctx, kube, cfg, *window); err != nil {
					return err
				}
			}
			if sel.Selector != "" {
				if rows, err = vizcli.SelectRows(ctx, kube, res, cfg.Namespace, sel.Selector, rows); err != nil {
					return err
				}
			}
			return stat.Render(env.Stdout, rows, g.Output)
		}
	})
}
