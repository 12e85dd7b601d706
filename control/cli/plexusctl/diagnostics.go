package plexusctl

// plexusctl diagnostics: a proxy's raw metrics, the endpoints destination
// gives a proxy, and the inbound policy of a pod's ports.

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/plexus-mesh/plexus/control/cli/authz"
	"github.com/plexus-mesh/plexus/control/cli/check"
	"github.com/plexus-mesh/plexus/control/cli/diagnostics"
	"github.com/plexus-mesh/plexus/control/cli/inboundpolicy"
	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/control/cli/stat"
)

// diagnosticsCommands are plexusctl diagnostics' subcommands.
func diagnosticsCommands() map[string]command {
	return map[string]command{
		"proxy-metrics": {"a proxy's raw Prometheus metrics through the API server: proxy-metrics po/NAME (or deploy/NAME: every pod, each headed # POD NS/NAME)", runDiagProxyMetrics},
		"endpoints":     {"what destination tells a proxy for SVC.NS:PORT, computed from the EndpointSlices by destination's rules (not asked of destination) [-o wide|json|yaml]", runDiagEndpoints},
		"policy":        {"inbound policy of each port of a pod: policy po/NAME [--port P] (plexusctl authz without --from)", runDiagPolicy},
	}
}

// runDiagnostics runs plexusctl diagnostics SUBCOMMAND.
func runDiagnostics(ctx context.Context, g *globals, args []string, env Env) error {
	cmds := diagnosticsCommands()
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		diagnosticsUsage(env.Stderr, cmds)
		if len(args) == 0 {
			return usageError{err: errors.New("no diagnostics command"), quiet: true}
		}
		return flag.ErrHelp
	}
	c, ok := cmds[args[0]]
	if !ok {
		return usagef("unknown diagnostics command %q: want one of %s (plexusctl diagnostics -h)", args[0], strings.Join(vizNames(cmds), ", "))
	}
	return c.run(ctx, g, args[1:], env)
}

func diagnosticsUsage(w io.Writer, cmds map[string]command) {
	fmt.Fprintln(w, "usage: plexusctl diagnostics COMMAND [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, n := range vizNames(cmds) {
		fmt.Fprintf(w, "  %-14s %s\n", n, cmds[n].summary)
	}
}

// diagnosticsFlagSet is newFlagSet whose -h starts with the command's
// summary.
func diagnosticsFlagSet(name string, g *globals, env Env) *flag.FlagSet {
	fs := newFlagSet("diagnostics "+name, g, env)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "plexusctl diagnostics %s: %s\n\nflags:\n", name, diagnosticsCommands()[name].summary)
		fs.PrintDefaults()
	}
	return fs
}

func runDiagProxyMetrics(ctx context.Context, g *globals, args []string, env Env) error {
	fs := diagnosticsFlagSet("proxy-metrics", g, env)
	timeout := fs.Duration("timeout", 30*time.Second, "give up on the API server after this long")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	kind, name, err := diagnostics.ParseTarget(pos)
	if err != nil {
		return usagef("%v: want diagnostics proxy-metrics (po|deploy)/NAME or KIND NAME", err)
	}
	client, _, ns, err := connect(g)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	m := diagnostics.ProxyMetrics{Stat: stat.Stat{Client: client, Scrape: stat.ProxyScraper(client)}}
	return m.Run(ctx, env.Stdout, kind, ns, name)
}

func runDiagEndpoints(ctx context.Context, g *globals, args []string, env Env) error {
	fs := diagnosticsFlagSet("endpoints", g, env)
	trustDomain := fs.String("trust-domain", "", "trust domain of the identities (default: destination's, read from its Deployment like authz; "+install.DefaultConfig().TrustDomain+" without one)")
	clusterDomain := fs.String("cluster-domain", install.DefaultClusterDomain, "the cluster's DNS domain")
	timeout := fs.Duration("timeout", 30*time.Second, "give up on the API server after this long")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want diagnostics endpoints SVC.NS:PORT (or SVC.NS.svc.%s:PORT)", *clusterDomain)
	}
	a, err := diagnostics.ParseAuthority(pos[0], *clusterDomain)
	if err != nil {
		return usagef("%v (e.g. web.shop:80)", err)
	}
	if err := tableOutput(g); err != nil {
		return err
	}
	client, _, _, err := connect(g)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	td := *trustDomain
	if td == "" {
		s, err := inboundpolicy.Clients{Kube: client}.Settings(ctx, check.Namespace)
		if err != nil {
			return err
		}
		td = s.TrustDomain.Value
	}
	e := diagnostics.Endpoints{Client: client, TrustDomain: cmp.Or(td, install.DefaultConfig().TrustDomain), ClusterDomain: *clusterDomain}
	report, err := e.Run(ctx, a)
	if err != nil {
		return err
	}
	return diagnostics.RenderEndpoints(env.Stdout, report, g.output)
}

// runDiagPolicy is plexusctl authz for one pod, without --from.
func runDiagPolicy(ctx context.Context, g *globals, args []string, env Env) error {
	fs := diagnosticsFlagSet("policy", g, env)
	port := fs.Uint("port", 0, "show only this port, declared by the pod or not (default: every TCP port its containers declare)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up on the API server after this long")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	kind, name, err := diagnostics.ParseTarget(pos)
	if err == nil && kind != diagnostics.Pod {
		err = fmt.Errorf("unknown kind %q: want po|pod (plexusctl authz takes workloads)", kind)
	}
	if err != nil {
		return usagef("%v: want diagnostics policy po/NAME or pod NAME", err)
	}
	if err := tableOutput(g); err != nil {
		return err
	}
	if *port > 65535 {
		return usagef("--port %d: want 1-65535", *port)
	}
	clients, _, ns, err := connectPolicy(g)
	if err != nil {
		return err
	}
	cfg := authz.Config{Kind: authz.Pod, Name: name, Namespace: ns, Port: uint16(*port), ControlPlaneNamespace: check.Namespace}
	if err := cfg.Validate(); err != nil {
		return usageError{err: err}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	report, err := authz.Authz{Clients: clients}.Run(ctx, cfg)
	if err != nil {
		return err
	}
	return authz.Render(env.Stdout, report, g.output)
}
