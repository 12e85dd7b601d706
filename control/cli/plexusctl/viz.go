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
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/control/api/tapapi"
	"github.com/plexus-mesh/plexus/control/cli/routes"
	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/control/cli/viz"
	"github.com/plexus-mesh/plexus/control/cli/viz/dashboard"
	"github.com/plexus-mesh/plexus/control/cli/viz/edges"
	"github.com/plexus-mesh/plexus/control/cli/viz/promstat"
	"github.com/plexus-mesh/plexus/control/cli/viz/tapview"
	"github.com/plexus-mesh/plexus/control/cli/viz/top"
	"github.com/plexus-mesh/plexus/control/tapclient"
	"github.com/plexus-mesh/plexus/control/vizquery"
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

// tapFlags are the filters of tap and top.
type tapFlags struct {
	to, toNamespace                    string
	method, path, authority, direction string
	maxRPS                             float64
	limit                              int
}

func (t *tapFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.to, "to", "", "only outbound requests to this resource: KIND/NAME (deploy/books), or ns/NAME")
	fs.StringVar(&t.toNamespace, "to-namespace", "", "namespace of --to (default: the tapped resource's)")
	fs.StringVar(&t.method, "method", "", "only requests with this HTTP method")
	fs.StringVar(&t.path, "path", "", "only requests whose path starts with this")
	fs.StringVar(&t.authority, "authority", "", "only requests with this :authority (Host)")
	fs.StringVar(&t.direction, "direction", "", "only inbound or outbound requests (default both)")
	fs.Float64Var(&t.maxRPS, "max-rps", 0, "requests per second to observe, over all tapped pods (default: the tap service's, 100)")
	fs.IntVar(&t.limit, "limit", 0, "stop after this many requests (default: run until Ctrl-C)")
}

// request is the tap request of t for objects in ns.
func (t tapFlags) request(ns string) (tapapi.Request, error) {
	r := tapapi.Request{Method: t.method, PathPrefix: t.path, Authority: t.authority, Direction: t.direction, MaxRPS: t.maxRPS, Limit: t.limit}
	switch t.direction {
	case "", "inbound", "outbound":
	default:
		return r, fmt.Errorf("--direction %q: want inbound or outbound", t.direction)
	}
	if t.maxRPS < 0 || t.limit < 0 {
		return r, errors.New("--max-rps and --limit must not be negative")
	}
	if t.to == "" {
		if t.toNamespace != "" {
			r.ToNamespace = t.toNamespace
		}
		return r, nil
	}
	to, err := viz.ParseTarget([]string{t.to}, true)
	if err != nil {
		return r, fmt.Errorf("--to %q: %w", t.to, err)
	}
	if !to.Kind.Tappable() {
		return r, fmt.Errorf("--to %q: %s cannot be a destination", t.to, to.Kind)
	}
	r.ToNamespace = t.toNamespace
	if r.ToNamespace == "" {
		r.ToNamespace = ns
	}
	if to.Kind == viz.Namespaces {
		r.ToNamespace = to.Name
	} else {
		r.ToResource, r.ToName = string(to.Kind), to.Name
	}
	return r, nil
}

// tapTargets resolves tap's arguments to the objects to tap.
func tapTargets(ctx context.Context, kube kubernetes.Interface, t viz.Target, ns string, sel selection) ([]viz.Object, error) {
	switch {
	case t.Kind == viz.Namespaces && t.Name == "" && sel.selector == "":
		return []viz.Object{{Name: ns}}, nil
	case t.Name != "":
		if t.Kind == viz.Namespaces {
			return []viz.Object{{Name: t.Name}}, nil
		}
		return []viz.Object{{Namespace: ns, Name: t.Name}}, nil
	}
	objs, err := viz.Select(ctx, kube, t.Kind, sel.namespaceOf(ns), sel.selector)
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no %s matches -l %q", t.Kind, sel.selector)
	}
	return objs, nil
}

// runVizTap runs tap, or top.
func runVizTap(isTop bool) func(context.Context, *globals, []string, Env) error {
	return func(ctx context.Context, g *globals, args []string, env Env) error {
		name := "viz tap"
		if isTop {
			name = "viz top"
		}
		fs := newFlagSet(name, g, env)
		var tf tapFlags
		var sel selection
		var opts top.Options
		tf.register(fs)
		sel.register(fs)
		if isTop {
			fs.BoolVar(&opts.HideSources, "hide-sources", false, "group sources together")
			fs.BoolVar(&opts.Routes, "routes", false, "group by route instead of path")
		}
		pos, err := parse(fs, args)
		if err != nil {
			return err
		}
		hint := "want " + name + " KIND/NAME (deploy/web), ns/NAME, or KIND -l SELECTOR"
		t, err := viz.ParseTarget(pos, false)
		if err != nil {
			return usagef("%v: %s", err, hint)
		}
		if !t.Kind.Tappable() {
			return usagef("%s cannot be tapped: %s", t.Kind, hint)
		}
		if t.Name == "" && sel.selector == "" && t.Kind != viz.Namespaces {
			return usagef("%s names no object: %s", pos[0], hint)
		}
		if sel.all && sel.selector == "" {
			return usagef("-A needs -l: %s", hint)
		}
		switch {
		case isTop && g.output != "":
			return usagef("top has no -o: it draws a table")
		case !isTop && g.output != tapview.FormatLines && g.output != tapview.FormatWide && g.output != tapview.FormatJSON:
			return usagef("unknown output format %q: want wide or json", g.output)
		}
		kube, restCfg, ns, err := connect(g)
		if err != nil {
			return err
		}
		if _, err := tf.request(ns); err != nil {
			return usageError{err: err}
		}
		objs, err := tapTargets(ctx, kube, t, ns, sel)
		if err != nil {
			return err
		}
		stream := tapStreams(restCfg, t.Kind, objs, tf)
		if !isTop {
			p := tapview.Printer{Out: env.Stdout, Notes: env.Stderr, Format: g.output}
			var mu sync.Mutex
			return tapError(stream(ctx, func(ev tapapi.Event) error {
				mu.Lock()
				defer mu.Unlock()
				return p.Print(ev)
			}), t, ns)
		}
		s := &top.Session{Out: env.Stdout, TTY: isTerminal(env.Stdout), Opts: opts, Title: "plexusctl viz top " + t.String(), MaxRows: 40}
		if f, ok := env.Stdout.(*os.File); ok && s.TTY {
			s.MaxRows = top.TerminalRows(f, s.MaxRows)
		}
		var ticks <-chan time.Time
		switch {
		case s.TTY:
			tk := time.NewTicker(top.TerminalInterval)
			defer tk.Stop()
			ticks = tk.C
		case tf.limit == 0:
			tk := time.NewTicker(plainTopInterval)
			defer tk.Stop()
			ticks = tk.C
		}
		return tapError(s.Run(ctx, stream, ticks), t, ns)
	}
}

// plainTopInterval is the time between tables of top when its output is
// not a terminal.
const plainTopInterval = 5 * time.Second

// tapStreams taps every object at once, feeding one callback (called
// from several goroutines: it must lock); --limit counts requests over
// them all, and --max-rps is shared among them.
func tapStreams(cfg *rest.Config, kind viz.Kind, objs []viz.Object, tf tapFlags) func(context.Context, func(tapapi.Event) error) error {
	return func(ctx context.Context, fn func(tapapi.Event) error) error {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		var mu sync.Mutex
		ended := 0
		each := func(ev tapapi.Event) error {
			if err := fn(ev); err != nil {
				return err
			}
			if tf.limit > 0 && ev.Type == tapapi.ResponseEnd {
				mu.Lock()
				ended++
				if ended >= tf.limit {
					cancel()
				}
				mu.Unlock()
			}
			return nil
		}
		errs := make([]error, len(objs))
		var wg sync.WaitGroup
		for i, o := range objs {
			ns, resource := o.Namespace, string(kind)
			if kind == viz.Namespaces {
				ns = o.Name
			}
			req, _ := tf.request(ns) // checked before
			req.MaxRPS /= float64(len(objs))
			wg.Go(func() {
				if errs[i] = tapclient.Stream(ctx, cfg, ns, resource, o.Name, req, each); errs[i] != nil {
					cancel()
				}
			})
		}
		wg.Wait()
		return errors.Join(errs...)
	}
}

// tapError turns a refused tap into one line naming the RBAC it needs.
func tapError(err error, t viz.Target, ns string) error {
	if err == nil || !tapclient.IsForbidden(err) {
		return err
	}
	where := "in namespace " + ns
	if t.Kind == viz.Namespaces {
		where = "in namespace " + t.Name
	}
	return fmt.Errorf("not allowed to tap %s %s: you need verb %s on resource %s/%s in API group %s (bind the ClusterRole plexus-viz-tap): %w",
		t, where, tapapi.Verb, t.Kind, tapapi.Subresource, tapapi.Group, err)
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

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
	prom, err := viz.Prometheus(restCfg)
	return kube, prom, ns, err
}

func runVizEdges(ctx context.Context, g *globals, args []string, env Env) error {
	fs := newFlagSet("viz edges", g, env)
	var sel selection
	fs.BoolVar(&sel.all, "all-namespaces", false, "every namespace")
	fs.BoolVar(&sel.all, "A", false, "shorthand for --all-namespaces")
	window := fs.Duration("window", vizquery.DefaultWindow, "how far back traffic counts (at least two scrape intervals, 20s)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	var kind viz.Kind
	switch len(pos) {
	case 0:
	case 1:
		if kind, err = viz.ParseKind(pos[0]); err != nil {
			return usagef("%v: want viz edges [KIND] [-n NAMESPACE | -A]", err)
		}
		if kind == viz.Pods || kind == viz.Namespaces || kind == viz.Services {
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
		objs, err := viz.Select(ctx, kube, viz.Namespaces, "", "")
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

func runVizRoutes(ctx context.Context, g *globals, args []string, env Env) error {
	fs := newFlagSet("viz routes", g, env)
	window := fs.Duration("window", vizquery.DefaultWindow, "the window rates are computed over (at least 20s)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	t, err := viz.ParseTarget(pos, true)
	if err != nil {
		return usagef("%v: want viz routes KIND/NAME (deploy/web, ns/shop, po/web-1, ...)", err)
	}
	if t.Kind == viz.Services {
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
	return routes.Render(env.Stdout, rows, g.output)
}

func runVizStat(ctx context.Context, g *globals, args []string, env Env) error {
	fs := newFlagSet("viz stat", g, env)
	var sel selection
	sel.register(fs)
	window := fs.Duration("window", 0, "the window: rates over it from Prometheus (default 1m, at least 20s); the time between the two scrapes of each proxy without viz (default 5s)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 1 || len(pos) > 2 {
		return usagef("want viz stat (ns|deploy|pod) [NAME] [-n NAMESPACE | -A] [-l SELECTOR]")
	}
	res, err := stat.ParseResource(pos[0])
	if err != nil {
		return usageError{err: err}
	}
	cfg := stat.Config{Resource: res}
	if len(pos) == 2 {
		cfg.Name = pos[1]
	}
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
		prom, err := viz.Prometheus(restCfg)
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

// scrapeStat is plexusctl stat's measurement, over every namespace when
// cfg.Namespace is "" (for deployments and pods).
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
	nss, err := viz.Select(ctx, kube, viz.Namespaces, "", "")
	if err != nil {
		return nil, err
	}
	var all []stat.Row
	for _, n := range nss {
		one := cfg
		one.Namespace = n.Name
		rows, err := s.Run(ctx, one)
		if err != nil && cfg.Name == "" {
			return nil, err
		}
		all = append(all, rows...)
	}
	return all, nil
}

// selectRows keeps the rows of objects whose labels match selector.
func selectRows(ctx context.Context, kube kubernetes.Interface, res stat.Resource, ns, selector string, rows []stat.Row) ([]stat.Row, error) {
	kind := map[stat.Resource]viz.Kind{stat.Namespaces: viz.Namespaces, stat.Deployments: viz.Deployments, stat.Pods: viz.Pods}[res]
	objs, err := viz.Select(ctx, kube, kind, ns, selector)
	if err != nil {
		return nil, usageError{err: err}
	}
	keep := map[viz.Object]bool{}
	for _, o := range objs {
		keep[o] = true
	}
	out := rows[:0]
	for _, r := range rows {
		o := viz.Object{Namespace: r.Namespace, Name: r.Name}
		if keep[o] {
			out = append(out, r)
		}
	}
	return out, nil
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
