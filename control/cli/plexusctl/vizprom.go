package plexusctl

// plexusctl viz edges, routes and stat: answers from the viz Prometheus.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

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
func connectPrometheus(ctx context.Context, g *globals, window time.Duration, without string) (kubernetes.Interface, *vizquery.Client, string, error) {
	if window < minPromWindow {
		return nil, nil, "", usagef("--window %s: Prometheus scrapes every 10s, want at least %s", window, minPromWindow)
	}
	kube, restCfg, ns, err := connect(g)
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

func vizEdgesCmd(g *globals, env Env) *cobra.Command {
	return leaf("edges [KIND]", "who talks to whom, secured or not: edges [deploy|sts|ds|...] [-n NAMESPACE | -A] [-o wide|json]", func(fs *pflag.FlagSet) runFunc {
		var sel selection
		fs.BoolVarP(&sel.all, "all-namespaces", "A", false, "every namespace")
		window := fs.Duration("window", vizquery.DefaultWindow, "how far back traffic counts (at least two scrape intervals, 20s)")
		return func(ctx context.Context, pos []string) error {
			var kind vizcli.Kind
			var err error
			switch len(pos) {
			case 0:
			case 1:
				if kind, err = vizcli.ParseKind(pos[0]); err != nil {
					return usagef("%v: want viz edges [KIND] [-n NAMESPACE | -A]", err)
				}
				if kind == vizcli.Pods || kind == vizcli.Namespaces || kind == vizcli.Services {
					return usagef("edges are between workloads (deploy, sts, ds, ...): a client is known by its mesh identity, which names its service account, not its pod")
				}
			default:
				return usagef("want viz edges [KIND] [-n NAMESPACE | -A], got %q", strings.Join(pos, " "))
			}
			if err := tableOutput(g); err != nil {
				return err
			}
			kube, prom, ns, err := connectPrometheus(ctx, g, *window, "")
			if err != nil {
				return err
			}
			nss := []string{ns}
			if sel.all {
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
			return edges.Render(env.Stdout, edges.Filter(edges.Merge(lists...), kind), g.output, kind == "")
		}
	})
}

func vizRoutesCmd(g *globals, env Env) *cobra.Command {
	return leaf("routes KIND/NAME", "per-route traffic from Prometheus: routes deploy/web (or ns, pod, sts, ...)", func(fs *pflag.FlagSet) runFunc {
		window := fs.Duration("window", vizquery.DefaultWindow, "the window rates are computed over (at least 20s)")
		return func(ctx context.Context, pos []string) error {
			t, err := vizcli.ParseTarget(pos, true)
			if err != nil {
				return usagef("%v: want viz routes KIND/NAME (deploy/web, ns/shop, po/web-1, ...)", err)
			}
			if t.Kind == vizcli.Services {
				return usagef("routes are counted by the clients' proxies: name the client (deploy/web), not the service")
			}
			if err := tableOutput(g); err != nil {
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
			return routesview.Render(env.Stdout, rows, g.output)
		}
	})
}

func vizStatCmd(g *globals, env Env) *cobra.Command {
	return leaf("stat (ns|deploy|pod)[/NAME] [NAME]", "traffic statistics from Prometheus (scraping the proxies when viz is not installed): stat deploy, stat deploy/web", func(fs *pflag.FlagSet) runFunc {
		var sel selection
		sel.register(fs)
		window := fs.Duration("window", 0, "the window: rates over it from Prometheus (default 1m, at least 20s); the time between the two scrapes of each proxy without viz (default 5s)")
		return func(ctx context.Context, pos []string) error {
			res, name, err := stat.ParseKindAndName(pos)
			if err != nil {
				return usagef("%v: want viz stat (ns|deploy|pod) [NAME] [-n NAMESPACE | -A] [-l SELECTOR]", err)
			}
			cfg := stat.Config{Resource: res, Name: name}
			if err := tableOutput(g); err != nil {
				return err
			}
			kube, restCfg, ns, err := connect(g)
			if err != nil {
				return err
			}
			cfg.Namespace = sel.namespaceOf(ns)
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
					return usagef("--window %s: Prometheus scrapes every 10s, want at least %s", w, minPromWindow)
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
				if rows, err = scrapeStat(ctx, kube, cfg, *window); err != nil {
					return err
				}
			}
			if sel.selector != "" {
				if rows, err = selectRows(ctx, kube, res, cfg.Namespace, sel.selector, rows); err != nil {
					return err
				}
			}
			return stat.Render(env.Stdout, rows, g.output)
		}
	})
}

// scrapeStat is plexusctl stat's measurement, over every namespace when
// cfg.Namespace is "" (for deployments and pods): the namespaces are
// measured at once, and a name found in none of them is an error.
func scrapeStat(ctx context.Context, kube kubernetes.Interface, cfg stat.Config, window time.Duration) ([]stat.Row, error) {
	if window == 0 {
		window = 5 * time.Second
	}
	cfg.Window = window
	s := stat.Stat{Client: kube, Scrape: stat.ProxyScraper(kube), Sleep: stat.Sleep, Now: time.Now}
	if cfg.Resource == stat.Namespaces || cfg.Namespace != "" {
		if err := cfg.Validate(); err != nil {
			return nil, usageError{err: err}
		}
		return s.Run(ctx, cfg)
	}
	probe := cfg
	probe.Namespace = "all"
	if err := probe.Validate(); err != nil {
		return nil, usageError{err: err}
	}
	nss, err := vizcli.Select(ctx, kube, vizcli.Namespaces, "", "")
	if err != nil {
		return nil, err
	}
	rows := make([][]stat.Row, len(nss))
	errs := make([]error, len(nss))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, n := range nss {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			one := cfg
			one.Namespace = n.Name
			rows[i], errs[i] = s.Run(ctx, one)
		})
	}
	wg.Wait()
	var all []stat.Row
	for i := range nss {
		if errs[i] != nil && !(cfg.Name != "" && errors.Is(errs[i], stat.ErrNotFound)) {
			return nil, errs[i]
		}
		all = append(all, rows[i]...)
	}
	if cfg.Name != "" && len(all) == 0 {
		return nil, fmt.Errorf("%s %s %w in any namespace", cfg.Resource, cfg.Name, stat.ErrNotFound)
	}
	return all, nil
}

// selectRows keeps the rows of objects whose labels match selector.
func selectRows(ctx context.Context, kube kubernetes.Interface, res stat.Resource, ns, selector string, rows []stat.Row) ([]stat.Row, error) {
	if _, err := labels.Parse(selector); err != nil {
		return nil, usagef("-l %q: %v", selector, err)
	}
	kind := map[stat.Resource]vizcli.Kind{stat.Namespaces: vizcli.Namespaces, stat.Deployments: vizcli.Deployments, stat.Pods: vizcli.Pods}[res]
	objs, err := vizcli.Select(ctx, kube, kind, ns, selector)
	if err != nil {
		return nil, err
	}
	keep := map[vizcli.Object]bool{}
	for _, o := range objs {
		keep[o] = true
	}
	out := rows[:0]
	for _, r := range rows {
		o := vizcli.Object{Namespace: r.Namespace, Name: r.Name}
		if keep[o] {
			out = append(out, r)
		}
	}
	return out, nil
}
