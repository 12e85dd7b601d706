// Command plexus-proxy is the Plexus sidecar proxy. It reads PLEXUS_PROXY_*
// environment variables (see sidecar/README.md) and runs until SIGTERM.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/proxy"
)

func main() {
	cfg, err := config.FromEnv(os.LookupEnv)
	if err == nil {
		err = cfg.Validate()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "plexus-proxy: invalid configuration:\n%v\n", err)
		os.Exit(2)
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	if _, set := os.LookupEnv("GOMAXPROCS"); !set {
		runtime.GOMAXPROCS(cfg.Cores) // an explicit GOMAXPROCS wins, as Go users expect
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if err := proxy.Run(ctx, proxy.RunOptions{Config: cfg, Log: log, Registry: reg, NewIdentity: newIdentity}); err != nil {
		log.Error("plexus-proxy stopped", "err", err)
		os.Exit(1)
	}
}
