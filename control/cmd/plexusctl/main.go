// Command plexusctl installs, upgrades, checks and observes Plexus (see
// control/cli/plexusctl; plexusctl --help lists its commands).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/plexus-mesh/plexus/control/cli/plexusctl"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := plexusctl.Main(ctx, os.Args[1:], plexusctl.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Colour: plexusctl.Colour(os.Stdout, os.Getenv)})
	stop()
	os.Exit(code)
}
