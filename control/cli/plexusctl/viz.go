package plexusctl

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"sort"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/control/cli/viz"
	"github.com/plexus-mesh/plexus/control/cli/viz/dashboard"
	"github.com/plexus-mesh/plexus/deploy"
)

// vizCommands are plexusctl viz's subcommands.
func vizCommands() map[string]command {
	return map[string]command{
		"install":       {"print the viz extension's manifests for kubectl apply -f -", runVizInstall},
		"uninstall":     {"print the viz extension's objects for kubectl delete -f - (APIService first)", runVizUninstall},
		"allow-scrapes": {"print the policy that lets Prometheus scrape the proxies of -n NAMESPACE under any default inbound policy", runVizAllowScrapes},
		"tap":           {"live requests: tap deploy/web [--to deploy/books] [--method GET] [--path /prefix] [-o wide|json]", runVizTap(false)},
		"top":           {"the hottest paths of a live tap: top deploy/web [--hide-sources] [--routes]", runVizTap(true)},
		"edges":         {"who talks to whom, secured or not: edges [deploy|sts|ds|...] [-n NAMESPACE | -A] [-o wide|json]", runVizEdges},
		"routes":        {"per-route traffic from Prometheus: routes deploy/web (or ns, pod, sts, ...)", runVizRoutes},
		"stat":          {"traffic statistics from Prometheus (scraping the proxies when viz is not installed): stat ns|deploy|pod [NAME]", runVizStat},
		"dashboard":     {"port-forward to the dashboard and open it: dashboard [--port 50750] [--show browser|url|none]", runVizDashboard},
	}
}

// runViz runs plexusctl viz SUBCOMMAND.
func runViz(ctx context.Context, g *globals, args []string, env Env) error {
	cmds := vizCommands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		vizUsage(env.Stderr, cmds)
		if len(args) == 0 {
			return usageError{err: errors.New("no viz command"), quiet: true}
		}
		return flag.ErrHelp
	}
	c, ok := cmds[args[0]]
	if !ok {
		return usagef("unknown viz command %q: want one of %s (plexusctl viz -h)", args[0], strings.Join(vizNames(cmds), ", "))
	}
	return c.run(ctx, g, args[1:], env)
}

func vizNames(cmds map[string]command) []string {
	var names []string
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func vizUsage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: plexusctl viz COMMAND [flags] [KIND/NAME | KIND NAME]")
	fmt.Fprintln(w, "\nThe viz extension (namespace plexus-viz): tap, Prometheus and the dashboard.")
	fmt.Fprintf(w, "Kinds: %s.\n\ncommands:\n", viz.KindNames)
	for _, n := range vizNames(cmds) {
		fmt.Fprintf(w, "  %-14s %s\n", n, cmds[n].summary)
	}
}

// selection is -A and -l, on the commands that take them.
type selection struct {
	all      bool
	selector string
}

func (s *selection) register(fs *flag.FlagSet) {
	fs.BoolVar(&s.all, "all-namespaces", false, "every namespace")
	fs.BoolVar(&s.all, "A", false, "shorthand for --all-namespaces")
	fs.StringVar(&s.selector, "selector", "", "only objects whose labels match (kubectl's -l syntax)")
	fs.StringVar(&s.selector, "l", "", "shorthand for --selector")
}

// namespaceOf is "" (every namespace) with -A, else ns.
func (s selection) namespaceOf(ns string) string {
	if s.all {
		return ""
	}
	return ns
}

func runVizInstall(_ context.Context, g *globals, args []string, env Env) error {
	fs := newFlagSet("viz install", g, env)
	if err := parseConfig(fs, args, func() error { return nil }); err != nil {
		return err
	}
	return viz.Renderer{Manifests: deploy.Manifests}.Install(env.Stdout)
}

func runVizUninstall(_ context.Context, g *globals, args []string, env Env) error {
	fs := newFlagSet("viz uninstall", g, env)
	if err := parseConfig(fs, args, func() error { return nil }); err != nil {
		return err
	}
	return viz.Renderer{Manifests: deploy.Manifests}.Uninstall(env.Stdout)
}

func runVizAllowScrapes(_ context.Context, g *globals, args []string, env Env) error {
	fs := newFlagSet("viz allow-scrapes", g, env)
	var nets []string
	for _, n := range viz.DefaultScrapeNetworks {
		nets = append(nets, n.String())
	}
	networks := fs.String("networks", strings.Join(nets, ","),
		"comma-separated CIDRs the scrapes may come from. Prometheus is not meshed, so its address is all that tells it apart, and Plexus does not know the cluster's pod networks: the default admits every address. "+
			"Narrow it to the pod network(s) where Prometheus runs; add the nodes' network to keep plexusctl stat, which scrapes through the API server, working")
	var cfg viz.ScrapeConfig
	if err := parseConfig(fs, args, func() error {
		cfg.Namespace = namespace(g)
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
	return viz.AllowScrapes(env.Stdout, cfg)
}

func runVizDashboard(ctx context.Context, g *globals, args []string, env Env) error {
	cfg := dashboard.Config{Address: dashboard.DefaultAddress, Port: dashboard.DefaultPort, Show: dashboard.ShowBrowser}
	fs := newFlagSet("viz dashboard", g, env)
	fs.IntVar(&cfg.Port, "port", cfg.Port, "local port to listen on (0: any free one)")
	fs.StringVar(&cfg.Address, "address", cfg.Address, "local address to listen on (the dashboard answers only to localhost and loopback names)")
	fs.StringVar(&cfg.Show, "show", cfg.Show, "browser: print the URL and open it when there is a display; url: print it only; none: print nothing")
	if err := parseConfig(fs, args, func() error { return cfg.Validate() }); err != nil {
		return err
	}
	kube, restCfg, _, err := connect(g)
	if err != nil {
		return err
	}
	// An HTTP/2 connection cannot be upgraded to a WebSocket.
	h1 := rest.CopyConfig(restCfg)
	h1.TLSClientConfig.NextProtos = []string{"http/1.1"}
	hc, err := rest.HTTPClientFor(h1)
	if err != nil {
		return fmt.Errorf("HTTP client for the API server: %w", err)
	}
	base, _, err := rest.DefaultServerUrlFor(h1)
	if err != nil {
		return fmt.Errorf("the API server's address: %w", err)
	}
	dialer := dashboard.PodDialer{HTTP: hc, BaseURL: strings.TrimSuffix(base.String(), "/")}
	d := dashboard.Dashboard{Kube: kube, Dial: dialer.Dial, Out: env.Stdout, Err: env.Stderr, Browser: dashboard.SystemBrowser(os.Getenv)}
	return d.Run(ctx, cfg)
}
