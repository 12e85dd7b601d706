package plexusctl

import (
	"errors"
	"flag"
	"fmt"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/plexus-mesh/plexus/control/cli/stat"
)

// kubectl's manners: flags before, between and after arguments, the
// kubeconfig and its context's namespace, and the output formats.

// globals are kubectl's connection and output flags, accepted before and
// after the subcommand.
type globals struct {
	kubeconfig, context, namespace, output string
}

func (g *globals) register(fs *flag.FlagSet) {
	fs.StringVar(&g.kubeconfig, "kubeconfig", g.kubeconfig, "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&g.context, "context", g.context, "kubeconfig context to use")
	fs.StringVar(&g.namespace, "namespace", g.namespace, "namespace (default: the context's)")
	fs.StringVar(&g.namespace, "n", g.namespace, "shorthand for --namespace")
	fs.StringVar(&g.output, "output", g.output, "output format where output is a table: json|yaml|wide")
	fs.StringVar(&g.output, "o", g.output, "shorthand for --output")
}

// parse parses a subcommand's flags, which may come before, between and
// after its arguments (as kubectl allows); "--" ends the flags.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err: err, quiet: true}
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseConfig parses a command that takes flags only, then validates the
// Config the flags filled in; both kinds of error are usage errors.
func parseConfig(fs *flag.FlagSet, args []string, validate func() error) error {
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected arguments %v", pos)
	}
	if err := validate(); err != nil {
		return usageError{err: err}
	}
	return nil
}

func newFlagSet(name string, g *globals, env Env) *flag.FlagSet {
	fs := flag.NewFlagSet("plexusctl "+name, flag.ContinueOnError)
	fs.SetOutput(env.Stderr)
	g.register(fs)
	return fs
}

// connect builds the client from the kubeconfig, like kubectl, and
// returns the namespace to use (-n, else the context's, else default).
func connect(g *globals) (kubernetes.Interface, *rest.Config, string, error) {
	cc := clientConfig(g)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "plexusctl"
	ns := g.namespace
	if ns == "" {
		if ns, _, err = cc.Namespace(); err != nil {
			return nil, nil, "", fmt.Errorf("kubeconfig namespace: %w", err)
		}
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubernetes client: %w", err)
	}
	return client, cfg, ns, nil
}

func clientConfig(g *globals) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if g.kubeconfig != "" {
		rules.ExplicitPath = g.kubeconfig
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: g.context})
}

// namespace is -n, else the kubeconfig context's, else default; it needs
// no cluster.
func namespace(g *globals) string {
	if g.namespace != "" {
		return g.namespace
	}
	if ns, _, err := clientConfig(g).Namespace(); err == nil && ns != "" {
		return ns
	}
	return "default"
}

// tableOutput checks -o for the commands that print tables.
func tableOutput(g *globals) error {
	switch g.output {
	case stat.FormatTable, stat.FormatWide, stat.FormatJSON, stat.FormatYAML:
		return nil
	}
	return usagef("unknown output format %q: want json, yaml or wide", g.output)
}
