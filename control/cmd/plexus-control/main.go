// Command plexus-control runs one control-plane service per invocation:
// plexus-control identity | destination | gateway | injector | issuer | service-mirror | sp-validator | tap | web [flags].
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/plexus-mesh/plexus/control/destinationcmd"
	"github.com/plexus-mesh/plexus/control/identitycmd"
	"github.com/plexus-mesh/plexus/control/injectcmd"
	"github.com/plexus-mesh/plexus/control/spvalidatorcmd"
	"github.com/plexus-mesh/plexus/multicluster/gatewaycmd"
	"github.com/plexus-mesh/plexus/multicluster/mirrorcmd"
	"github.com/plexus-mesh/plexus/viz/dashboardcmd"
	"github.com/plexus-mesh/plexus/viz/tapcmd"
)

// commands maps each subcommand to its entry point.
func commands() map[string]func(ctx context.Context, args []string, out io.Writer) error {
	return map[string]func(ctx context.Context, args []string, out io.Writer) error{
		"identity":    identitycmd.Main,
		"destination": destinationcmd.Main,
		"issuer":      identitycmd.IssuerMain,
		"web":         dashboardcmd.Main,
		"gateway": func(ctx context.Context, args []string, _ io.Writer) error {
			return gatewaycmd.Main(ctx, args, os.Stderr)
		},
		"service-mirror": func(ctx context.Context, args []string, _ io.Writer) error {
			return mirrorcmd.Main(ctx, args, os.Stderr)
		},
		"injector": func(ctx context.Context, args []string, _ io.Writer) error {
			return injectcmd.Main(ctx, args, os.Stderr)
		},
		"tap": func(ctx context.Context, args []string, _ io.Writer) error {
			return tapcmd.Main(ctx, args, os.Stderr)
		},
		"sp-validator": func(ctx context.Context, args []string, _ io.Writer) error {
			return spvalidatorcmd.Main(ctx, args, os.Stderr)
		},
	}
}

func main() {
	cmds := commands()
	var names []string
	for n := range cmds {
		names = append(names, n)
	}
	sort.Strings(names)
	if len(os.Args) < 2 || cmds[os.Args[1]] == nil {
		fmt.Fprintf(os.Stderr, "usage: plexus-control %s [flags]\n", strings.Join(names, "|"))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if err := cmds[os.Args[1]](ctx, os.Args[2:], os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "plexus-control %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}
