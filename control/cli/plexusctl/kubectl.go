package plexusctl

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/plexus-mesh/plexus/control/cli/stat"
)

// kubectl's manners: flags before, between and after arguments, the
// kubeconfig and its context's namespace, and the output formats.

// globals are kubectl's connection and output flags, persistent flags of
// every command, accepted before and after the subcommand.
type globals struct {
	kubeconfig, context, namespace, output string
}

func (g *globals) register(fs *pflag.FlagSet) {
	fs.StringVar(&g.kubeconfig, "kubeconfig", g.kubeconfig, "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&g.context, "context", g.context, "kubeconfig context to use")
	fs.StringVarP(&g.namespace, "namespace", "n", g.namespace, "namespace (default: the context's)")
	fs.StringVarP(&g.output, "output", "o", g.output, "output format where output is a table: json|yaml|wide")
}

// runFunc runs a command with its positional arguments, its flags parsed.
type runFunc func(ctx context.Context, args []string) error

// leaf is a command that runs: flags registers its flags and returns what
// runs it (closing over the flags' values).
func leaf(use, short string, flags func(fs *pflag.FlagSet) runFunc) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short}
	run := flags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return run(cmd.Context(), args) }
	return cmd
}

// noArgs checks a command that takes flags only, then validates what the
// flags filled in; both kinds of error are usage errors.
func noArgs(args []string, validate func() error) error {
	if len(args) > 0 {
		return usagef("unexpected arguments %v", args)
	}
	if err := validate(); err != nil {
		return usageError{err: err}
	}
	return nil
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
