// Command meshbench measures the direct path, the Plexus proxy pair and an
// nginx pair side by side on a pair of network namespaces it creates, and
// prints the result as Markdown tables (see package meshbench). With
// -baseline-proxy it also measures a second plexus-proxy build, as
// plexus-before, taking turns with the first on the same ports.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/plexus-mesh/plexus/integration/meshbench"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "meshbench:", err)
		os.Exit(1)
	}
}

func run() error {
	var cfg meshbench.Config
	var rates string
	flag.StringVar(&cfg.ProxyBin, "proxy", "bin/plexus-proxy", "plexus-proxy binary")
	flag.StringVar(&cfg.BaselineBin, "baseline-proxy", "", "a second plexus-proxy binary to compare against, measured as plexus-before (optional)")
	flag.StringVar(&rates, "rates", "500,1000,2000", "fixed request rates, ascending")
	flag.DurationVar(&cfg.Duration, "duration", 10*time.Second, "measured time per path and rate")
	flag.DurationVar(&cfg.Warmup, "warmup", 2*time.Second, "unmeasured time before each measurement")
	flag.DurationVar(&cfg.SaturateFor, "saturate", 5*time.Second, "closed-loop time per path for maximum throughput")
	flag.IntVar(&cfg.Workers, "workers", 32, "concurrent requests at most")
	flag.Parse()
	for _, r := range strings.Split(rates, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(r))
		if err != nil {
			return fmt.Errorf("-rates: %q is not a number", r)
		}
		cfg.Rates = append(cfg.Rates, n)
	}
	dir, err := os.MkdirTemp("", "meshbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	cfg.LogDir = dir

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	rep, err := meshbench.Run(ctx, cfg)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	fmt.Printf("## meshbench on %s: %d cores, %s, %s\n\n", host, runtime.NumCPU(), runtime.Version(), time.Now().UTC().Format(time.RFC3339))
	rep.Markdown(os.Stdout)
	return nil
}
