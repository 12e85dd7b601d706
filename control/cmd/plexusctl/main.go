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
	colour := false
	if fi, err := os.Stdout.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 && os.Getenv("NO_COLOR") == "" {
		colour = true
	}
	code := plexusctl.Main(ctx, os.Args[1:], plexusctl.Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Colour: colour})
	stop()
	os.Exit(code)
}
