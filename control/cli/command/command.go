// Package command holds what every plexusctl command is built from, the
// core's and an extension's alike (viz/cli/vizcmd): kubectl's global flags
// and its way of finding the cluster and the namespace, -A and -l, leaf
// and parent commands, usage errors, and the process streams.
package command

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/plexus-mesh/plexus/control/cli/portforward"
	"github.com/plexus-mesh/plexus/control/cli/stat"
)

// Env is what a command reads from its process.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Colour is true when stdout is a terminal (and NO_COLOR is unset).
	Colour bool
}

// UsageError marks errors that exit with the usage code. Quiet ones were
// already printed (by the flag package, or as help).
type UsageError struct {
	Err   error
	Quiet bool
}

func (u UsageError) Error() string { return u.Err.Error() }
func (u UsageError) Unwrap() error { return u.Err }

// Usagef is a UsageError with a formatted message.
func Usagef(format string, a ...any) error { return UsageError{Err: fmt.Errorf(format, a...)} }

// ErrReported is a failure whose details are already printed: plexusctl
// exits 1 and prints nothing more.
var ErrReported = errors.New("failure reported")

// Globals are kubectl's connection and output flags, persistent flags of
// every command, accepted before and after the subcommand.
type Globals struct {
	Kubeconfig, Context, Namespace, Output string
}

// Register adds the flags to fs.
func (g *Globals) Register(fs *pflag.FlagSet) {
	fs.StringVar(&g.Kubeconfig, "kubeconfig", g.Kubeconfig, "kubeconfig file (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&g.Context, "context", g.Context, "kubeconfig context to use")
	fs.StringVarP(&g.Namespace, "namespace", "n", g.Namespace, "namespace (default: the context's)")
	fs.StringVarP(&g.Output, "output", "o", g.Output, "output format where output is a table: json|yaml|wide")
}

// RunFunc runs a command with its positional arguments, its flags parsed.
type RunFunc func(ctx context.Context, args []string) error

// Leaf is a command that runs: flags registers its flags and returns what
// runs it (closing over the flags' values).
func Leaf(use, short string, flags func(fs *pflag.FlagSet) RunFunc) *cobra.Command {
	cmd := &cobra.Command{Use: use, Short: short}
	run := flags(cmd.Flags())
	cmd.RunE = func(cmd *cobra.Command, args []string) error { return run(cmd.Context(), args) }
	return cmd
}

// NoArgs checks a command that takes flags only, then validates what the
// flags filled in; both kinds of error are usage errors.
func NoArgs(args []string, validate func() error) error {
	if len(args) > 0 {
		return Usagef("unexpected arguments %v", args)
	}
	if err := validate(); err != nil {
		return UsageError{Err: err}
	}
	return nil
}

// ParentRun runs a command that only holds others: without one, its help
// as a usage error; with an unknown one, a usage error naming them.
func ParentRun(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		cmd.SetOut(cmd.ErrOrStderr())
		cmd.Help()
		return UsageError{Err: errors.New("no command"), Quiet: true}
	}
	var names []string
	for _, c := range cmd.Commands() {
		if c.IsAvailableCommand() {
			names = append(names, c.Name())
		}
	}
	return Usagef("unknown %s command %q: want one of %s", cmd.Name(), args[0], strings.Join(names, ", "))
}

// Connect builds the client from the kubeconfig, like kubectl, and
// returns the namespace to use (-n, else the context's, else default).
func Connect(g *Globals) (kubernetes.Interface, *rest.Config, string, error) {
	cc := clientConfig(g)
	cfg, err := cc.ClientConfig()
	if err != nil {
		return nil, nil, "", fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.UserAgent = "plexusctl"
	ns := g.Namespace
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

// ConnectPods is Connect with a dialer to pods' ports through the API
// server (port-forward) in place of the configuration.
func ConnectPods(g *Globals) (kubernetes.Interface, portforward.PodDialer, string, error) {
	client, cfg, ns, err := Connect(g)
	if err != nil {
		return nil, portforward.PodDialer{}, "", err
	}
	dialer, err := portforward.NewPodDialer(cfg)
	return client, dialer, ns, err
}

func clientConfig(g *Globals) clientcmd.ClientConfig {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if g.Kubeconfig != "" {
		rules.ExplicitPath = g.Kubeconfig
	}
	return clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{CurrentContext: g.Context})
}

// Namespace is -n, else the kubeconfig context's, else default; it needs
// no cluster.
func Namespace(g *Globals) string {
	if g.Namespace != "" {
		return g.Namespace
	}
	if ns, _, err := clientConfig(g).Namespace(); err == nil && ns != "" {
		return ns
	}
	return "default"
}

// TableOutput checks -o for the commands that print tables.
func TableOutput(g *Globals) error {
	switch g.Output {
	case stat.FormatTable, stat.FormatWide, stat.FormatJSON, stat.FormatYAML:
		return nil
	}
	return Usagef("unknown output format %q: want json, yaml or wide", g.Output)
}

// Selection is -A and -l, on the commands that take them.
type Selection struct {
	All      bool
	Selector string
}

// Register adds -A and -l to fs.
func (s *Selection) Register(fs *pflag.FlagSet) {
	fs.BoolVarP(&s.All, "all-namespaces", "A", false, "every namespace")
	fs.StringVarP(&s.Selector, "selector", "l", "", "only objects whose labels match (kubectl's -l syntax)")
}

// NamespaceOf is "" (every namespace) with -A, else ns.
func (s Selection) NamespaceOf(ns string) string {
	if s.All {
		return ""
	}
	return ns
}

// IsTerminal reports whether w is a terminal (not merely a character
// device, as /dev/null is).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Colour is whether to colour what goes to stdout: only on a terminal,
// and never with NO_COLOR set (https://no-color.org).
func Colour(stdout io.Writer, getenv func(string) string) bool {
	return IsTerminal(stdout) && getenv("NO_COLOR") == ""
}
