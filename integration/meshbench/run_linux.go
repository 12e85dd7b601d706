package meshbench

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os/exec"
	"time"

	"github.com/plexus-mesh/plexus/integration/loadgen"
)

// Config is one benchmark run.
type Config struct {
	ProxyBin    string        // plexus-proxy binary
	BaselineBin string        // optional second plexus-proxy binary, measured as plexus-before
	Rates       []int         // fixed request rates, ascending
	Duration    time.Duration // measured time per path and rate
	Warmup      time.Duration // unmeasured time before each measurement
	SaturateFor time.Duration // closed-loop run per path for max throughput
	Workers     int           // concurrent requests at most
	LogDir      string        // sidecars' logs and config
}

// Validate reports the first problem with c.
func (c Config) Validate() error {
	if c.ProxyBin == "" {
		return errors.New("meshbench: the plexus-proxy binary is required")
	}
	if len(c.Rates) == 0 {
		return errors.New("meshbench: at least one rate is required")
	}
	for i, r := range c.Rates {
		if r <= 0 || (i > 0 && r <= c.Rates[i-1]) {
			return fmt.Errorf("meshbench: rates %v must be positive and ascending", c.Rates)
		}
	}
	if c.Duration <= 0 || c.Workers <= 0 || c.SaturateFor <= 0 {
		return errors.New("meshbench: duration, saturate time and workers must be positive")
	}
	if _, err := exec.LookPath("nginx"); err != nil {
		return fmt.Errorf("meshbench: the peer proxy nginx is not installed: %w", err)
	}
	return nil
}

// path is one way from the client to the server.
type path struct {
	name     string
	port     int
	sidecars []*Sidecar
	// start is set for a plexus pair that takes turns with the other
	// build's pair (see turns_linux.go); last is its usage when last stopped.
	start func() ([]*Sidecar, error)
	last  []Usage
}

// Run sets up the topology, measures every path at every rate and at
// saturation, and tears everything down.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	topo, err := NewTopology()
	if err != nil {
		return nil, err
	}
	defer topo.Close()
	stopServer, err := topo.Serve()
	if err != nil {
		return nil, err
	}
	defer stopServer()

	var plexus []*Sidecar
	if cfg.BaselineBin == "" {
		plexus, err = startPair(func(netns string) (*Sidecar, error) { return StartPlexus(cfg.ProxyBin, netns, cfg.LogDir) }, topo)
		if err != nil {
			return nil, err
		}
		defer stopAll(plexus)
	}
	peer, err := startPair(func(netns string) (*Sidecar, error) {
		if netns == topo.ClientNetns {
			return StartNginx(netns, peerOutbound, fmt.Sprintf("%s:%d", serverAddr.Addr(), portPeer), cfg.LogDir)
		}
		return StartNginx(netns, peerInbound, fmt.Sprintf("%s:%d", serverAddr.Addr(), portPeer), cfg.LogDir)
	}, topo)
	if err != nil {
		return nil, err
	}
	defer stopAll(peer)

	paths := []*path{{name: "direct", port: portDirect}, {name: "plexus", port: portPlexus, sidecars: plexus}, {name: "nginx", port: portPeer, sidecars: peer}}
	rep := &Report{Duration: cfg.Duration}
	if cfg.BaselineBin != "" {
		paths = takeTurns(cfg, topo, paths)
		rep.Notes = append(rep.Notes, turnsNote(cfg))
	}
	client := topo.Client(cfg.Workers)
	for _, p := range paths {
		if err := p.in(client, func() error { return httpReady(ctx, client, URL(p.port)) }); err != nil {
			return nil, fmt.Errorf("path %s does not work: %w", p.name, err)
		}
	}

	rep.Memory = append(rep.Memory, memoryRow("idle", paths))
	for i, rate := range cfg.Rates {
		results := make([]RateResult, len(paths))
		for _, j := range order(paths, i) {
			err := paths[j].in(client, func() (err error) {
				results[j], err = measure(ctx, cfg, client, paths[j], rate)
				return err
			})
			if err != nil {
				return nil, err
			}
		}
		rep.Rates = append(rep.Rates, results...)
		rep.Memory = append(rep.Memory, memoryRow(fmt.Sprintf("after %d req/s", rate), paths))
	}
	rep.Throughput = make([]Throughput, len(paths))
	for _, j := range order(paths, len(cfg.Rates)) {
		p := paths[j]
		err := p.in(client, func() error {
			rps, res, err := loadgen.Saturate(ctx, loadgen.Config{URL: URL(p.port), Duration: cfg.SaturateFor, Workers: cfg.Workers, Client: client})
			rep.Throughput[j] = Throughput{Path: p.name, RPS: rps, Errors: res.Errors}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return rep, nil
}

func startPair(start func(netns string) (*Sidecar, error), topo *Topology) ([]*Sidecar, error) {
	var pair []*Sidecar
	for _, netns := range []string{topo.ClientNetns, topo.ServerNetns} {
		s, err := start(netns)
		if err != nil {
			stopAll(pair)
			return nil, err
		}
		pair = append(pair, s)
	}
	return pair, nil
}

func stopAll(ss []*Sidecar) {
	for _, s := range ss {
		s.Stop()
	}
}

func measure(ctx context.Context, cfg Config, client *http.Client, p *path, rate int) (RateResult, error) {
	lc := loadgen.Config{URL: URL(p.port), Rate: rate, Duration: cfg.Warmup, Workers: cfg.Workers, Client: client}
	if cfg.Warmup > 0 {
		if _, err := loadgen.Run(ctx, lc); err != nil {
			return RateResult{}, err
		}
	}
	before := cpuOf(p.sidecars)
	lc.Duration = cfg.Duration
	res, err := loadgen.Run(ctx, lc)
	if err != nil {
		return RateResult{}, err
	}
	cpu := cpuOf(p.sidecars) - before
	var perRequest time.Duration
	if n := len(res.Latencies) + res.Errors; n > 0 {
		perRequest = cpu / time.Duration(n)
	}
	return RateResult{
		Path: p.name, Rate: rate, Latency: loadgen.Summarize(res.Latencies),
		Errors: res.Errors, FirstErr: res.FirstErr,
		SidecarCPU: float64(cpu) / float64(res.Elapsed), CPUPerRequest: perRequest,
	}, nil
}

func cpuOf(ss []*Sidecar) time.Duration {
	var total time.Duration
	for _, s := range ss {
		if u, err := s.Usage(); err == nil {
			total += u.CPU
		}
	}
	return total
}

// memoryRow reads the sidecars' usage now, or for a pair taking turns,
// when it was last stopped.
func memoryRow(when string, paths []*path) MemoryRow {
	row := MemoryRow{When: when}
	for _, p := range paths {
		us := p.last
		if p.start == nil {
			us = usageOf(p.sidecars)
		}
		switch p.name {
		case "plexus":
			row.Plexus = us
		case "plexus-before":
			row.Before = us
		case "nginx":
			row.Peer = us
		}
	}
	return row
}

func usageOf(ss []*Sidecar) []Usage {
	var us []Usage
	for _, s := range ss {
		u, _ := s.Usage()
		us = append(us, u)
	}
	return us
}
