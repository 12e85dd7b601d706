package vizcmd

// plexusctl viz tap and top: live requests from the tap service.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/control/cli/command"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/viz/cli"
	"github.com/plexus-mesh/plexus/viz/cli/tapview"
	"github.com/plexus-mesh/plexus/viz/cli/top"
	"github.com/plexus-mesh/plexus/viz/tapclient"
)

// tapFlags are the filters of tap and top.
type tapFlags struct {
	to, from                                  tapEndFlags
	method, path, authority, route, direction string
	redact, redactQuery, show, showQuery      []string
	maxRate                                   float64
	limit                                     int
}

// tapEndFlags name one end of the tap's requests: --to or --from.
type tapEndFlags struct {
	resource, namespace, selector string
	addrs                         []string
}

func (e *tapEndFlags) register(fs *pflag.FlagSet, end, what, example string) {
	fs.StringVar(&e.resource, end, "", fmt.Sprintf("only requests %s this resource's pods: KIND/NAME (%s), or ns/NAME", what, example))
	fs.StringVar(&e.namespace, end+"-namespace", "", fmt.Sprintf("namespace of --%s and --%s-selector (default: the tapped resource's)", end, end))
	fs.StringVar(&e.selector, end+"-selector", "", fmt.Sprintf("only requests %s pods with these labels (app=books,track!=canary)", what))
	addr := "IP or IP:port"
	if end == "from" {
		addr = "IP" // a source's port is not known
	}
	fs.StringArrayVar(&e.addrs, end+"-addr", nil, fmt.Sprintf("only requests %s this %s (repeatable; added to the pods --%s and --%s-selector pick)", what, addr, end, end))
}

func (t *tapFlags) register(fs *pflag.FlagSet) {
	t.to.register(fs, "to", "to", "deploy/books")
	t.from.register(fs, "from", "from", "deploy/load")
	fs.StringVar(&t.method, "method", "", "only requests with this HTTP method")
	fs.StringVar(&t.path, "path", "", "only requests whose path starts with this")
	fs.StringVar(&t.authority, "authority", "", "only requests with this :authority (Host)")
	fs.StringVar(&t.route, "route", "", "only requests that matched this route (the route_name of viz routes)")
	fs.StringVar(&t.direction, "direction", "", "only inbound or outbound requests (default both)")
	fs.StringArrayVar(&t.redact, "redact-header", nil, "hide this header's value too (repeatable); hidden anyway: authorization, cookie, proxy-authorization and by default x-api-key, set-cookie, *-token, *-secret, *-password, *-api-key and more")
	fs.StringArrayVar(&t.redactQuery, "redact-query-param", nil, "hide this query parameter's value too (repeatable); hidden by default: access_token, token, key, api_key, secret, password, code, sig, signature, *_token, *_secret and more")
	fs.StringArrayVar(&t.show, "show-header", nil, "show this header's value though hidden by default (repeatable; never authorization, cookie, proxy-authorization)")
	fs.StringArrayVar(&t.showQuery, "show-query-param", nil, "show this query parameter's value though hidden by default (repeatable)")
	fs.Float64Var(&t.maxRate, "max-rate", 0, fmt.Sprintf("events per second to receive over all tapped pods, %d per request (default %d)", tapapi.EventsPerRequest, tapapi.DefaultMaxEventRate))
	fs.IntVar(&t.limit, "limit", 0, "stop after this many requests (default: run until Ctrl-C)")
}

// request is the tap request of t for objects in ns.
func (t tapFlags) request(ns string) (tapapi.Request, error) {
	r := tapapi.Request{Method: t.method, PathPrefix: t.path, Authority: t.authority, Route: t.route, Direction: t.direction,
		RedactHeaders: t.redact, RedactQueryParams: t.redactQuery, ShowHeaders: t.show, ShowQueryParams: t.showQuery,
		MaxEventRate: t.maxRate, Limit: t.limit,
		ToSelector: t.to.selector, ToAddrs: t.to.addrs, FromSelector: t.from.selector, FromAddrs: t.from.addrs}
	switch t.direction {
	case "", "inbound", "outbound":
	default:
		return r, fmt.Errorf("--direction %q: want inbound or outbound", t.direction)
	}
	if !tapapi.ValidEventRate(t.maxRate) || t.limit < 0 {
		return r, fmt.Errorf("--max-rate must be %g to %d and --limit not negative", tapapi.MinEventRate, tapapi.MaxEventRate)
	}
	for _, h := range t.show {
		if tapapi.IsAlwaysRedacted(h) {
			return r, fmt.Errorf("--show-header %q: %s are always hidden", h, strings.Join(tapapi.AlwaysRedacted, ", "))
		}
	}
	if r.MaxEventRate == 0 {
		r.MaxEventRate = tapapi.DefaultMaxEventRate
	}
	var err error
	if r.ToNamespace, r.ToResource, r.ToName, err = t.to.resolve("--to", ns); err != nil {
		return r, err
	}
	r.FromNamespace, r.FromResource, r.FromName, err = t.from.resolve("--from", ns)
	return r, err
}

// resolve returns the namespace, resource and name of the request's
// filter for the end named flag; ns is the tapped resource's namespace.
func (e tapEndFlags) resolve(flag, ns string) (namespace, resource, name string, err error) {
	namespace = e.namespace
	if namespace == "" && (e.resource != "" || e.selector != "") {
		namespace = ns
	}
	if e.resource == "" {
		return namespace, "", "", nil
	}
	end, err := vizcli.ParseTarget([]string{e.resource}, true)
	if err != nil {
		return "", "", "", fmt.Errorf("%s %q: %w", flag, e.resource, err)
	}
	if !vizcli.Tappable(end.Kind) {
		return "", "", "", fmt.Errorf("%s %q: %s cannot be filtered on", flag, e.resource, end.Kind)
	}
	if end.Kind == vizcli.Namespaces {
		return end.Name, "", "", nil
	}
	return namespace, string(end.Kind), end.Name, nil
}

// tapTargets resolves tap's arguments to the objects to tap.
func tapTargets(ctx context.Context, kube kubernetes.Interface, t vizcli.Target, ns string, sel command.Selection) ([]vizcli.Object, error) {
	switch {
	case t.Kind == vizcli.Namespaces && t.Name == "" && sel.Selector == "":
		return []vizcli.Object{{Name: ns}}, nil
	case t.Name != "":
		if t.Kind == vizcli.Namespaces {
			return []vizcli.Object{{Name: t.Name}}, nil
		}
		return []vizcli.Object{{Namespace: ns, Name: t.Name}}, nil
	}
	objs, err := vizcli.Select(ctx, kube, t.Kind, sel.NamespaceOf(ns), sel.Selector)
	if err != nil {
		return nil, err
	}
	if len(objs) == 0 {
		return nil, fmt.Errorf("no %s matches -l %q", t.Kind, sel.Selector)
	}
	return objs, nil
}

// vizTapCmd is tap, or top.
func vizTapCmd(g *command.Globals, env command.Env, isTop bool) *cobra.Command {
	use, short := "tap (KIND/NAME | KIND -l SELECTOR)", "live requests: tap deploy/web [--to deploy/books] [--method GET] [--path /prefix] [-o wide|json]"
	if isTop {
		use, short = "top (KIND/NAME | KIND -l SELECTOR)", "the hottest paths of a live tap: top deploy/web [--hide-sources] [--routes]"
	}
	return command.Leaf(use, short, func(fs *pflag.FlagSet) command.RunFunc {
		name := "viz tap"
		if isTop {
			name = "viz top"
		}
		var tf tapFlags
		var sel command.Selection
		var opts top.Options
		tf.register(fs)
		sel.Register(fs)
		if isTop {
			fs.BoolVar(&opts.HideSources, "hide-sources", false, "group sources together")
			fs.BoolVar(&opts.Routes, "routes", false, "group by route instead of path")
		}
		return func(ctx context.Context, pos []string) error {
			hint := "want " + name + " KIND/NAME (deploy/web), ns/NAME, or KIND -l SELECTOR"
			t, err := vizcli.ParseTarget(pos, false)
			if err != nil {
				return command.Usagef("%v: %s", err, hint)
			}
			if !vizcli.Tappable(t.Kind) {
				return command.Usagef("%s cannot be tapped: %s", t.Kind, hint)
			}
			if t.Name == "" && sel.Selector == "" && t.Kind != vizcli.Namespaces {
				return command.Usagef("%s names no object: %s", pos[0], hint)
			}
			if sel.All && sel.Selector == "" {
				return command.Usagef("-A needs -l: %s", hint)
			}
			switch {
			case isTop && g.Output != "":
				return command.Usagef("top has no -o: it draws a table")
			case !isTop && g.Output != tapview.FormatLines && g.Output != tapview.FormatWide && g.Output != tapview.FormatJSON:
				return command.Usagef("unknown output format %q: want wide or json", g.Output)
			}
			kube, restCfg, ns, err := command.Connect(g)
			if err != nil {
				return err
			}
			if _, err := tf.request(ns); err != nil {
				return command.UsageError{Err: err}
			}
			objs, err := tapTargets(ctx, kube, t, ns, sel)
			if err != nil {
				return err
			}
			stream := tapStreams(restCfg, t.Kind, objs, tf)
			if !isTop {
				p := tapview.Printer{Out: env.Stdout, Notes: env.Stderr, Format: g.Output}
				var mu sync.Mutex
				return tapError(stream(ctx, func(ev tapapi.Event) error {
					mu.Lock()
					defer mu.Unlock()
					return p.Print(ev)
				}), t, ns)
			}
			s := &top.Session{Out: env.Stdout, TTY: command.IsTerminal(env.Stdout), Opts: opts, Title: "plexusctl viz top " + t.String(), MaxRows: 40}
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
	})
}

// plainTopInterval is the time between tables of top when its output is
// not a terminal.
const plainTopInterval = 5 * time.Second

// tapStreams taps every object at once, feeding one callback (called
// from several goroutines: it must lock); --limit counts requests over
// them all, and --max-rate is shared among them.
func tapStreams(cfg *rest.Config, kind vizcli.Kind, objs []vizcli.Object, tf tapFlags) func(context.Context, func(tapapi.Event) error) error {
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
			if kind == vizcli.Namespaces {
				ns = o.Name
			}
			req, _ := tf.request(ns) // checked before
			req.MaxEventRate = max(req.MaxEventRate/float64(len(objs)), tapapi.MinEventRate)
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
func tapError(err error, t vizcli.Target, ns string) error {
	if err == nil || !tapclient.IsForbidden(err) {
		return err
	}
	where := "in namespace " + ns
	if t.Kind == vizcli.Namespaces {
		where = "in namespace " + t.Name
	}
	return fmt.Errorf("not allowed to tap %s %s: you need verb %s on resource %s/%s in API group %s (bind the ClusterRole plexus-viz-tap): %w",
		t, where, tapapi.Verb, t.Kind, tapapi.Subresource, tapapi.Group, err)
}
