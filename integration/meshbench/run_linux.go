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

	plexus, err := startPair(func(netns string) (*Sidecar, error) { return StartPlexus(cfg.ProxyBin, netns, cfg.LogDir) }, topo)
	if err != nil {
		return nil, err
	}
	defer stopAll(plexus)
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

	paths := []path{{"direct", portDirect, nil}, {"plexus", portPlexus, plexus}, {"nginx", portPeer, peer}}
	client := topo.Client(cfg.Workers)
	for _, p := range paths {
		if err := httpReady(ctx, client, URL(p.port)); err != nil {
			return nil, fmt.Errorf("path %s does not work: %w", p.name, err)
		}
	}

	rep := &Report{Duration: cfg.Duration}
	rep.Memory = append(rep.Memory, memoryRow("idle", plexus, peer))
	for _, rate := range cfg.Rates {
		for _, p := range paths {
			res, err := measure(ctx, cfg, client, p, rate)
			if err != nil {
				return nil, err
			}
			rep.Rates = append(rep.Rates, res)
		}
		rep.Memory = append(rep.Memory, memoryRow(fmt.Sprintf("after %d req/s", rate), plexus, peer))
	}
	for _, p := range paths {
		rps, res, err := loadgen.Saturate(ctx, loadgen.Config{URL: URL(p.port), Duration: cfg.SaturateFor, Workers: cfg.Workers, Client: client})
		if err != nil {
			return nil, err
		}
		rep.Throughput = append(rep.Throughput, Throughput{Path: p.name, RPS: rps, Errors: res.Errors})
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

func measure(ctx context.Context, cfg Config, client *http.Client, p path, rate int) (RateResult, error) {
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
	return RateResult{
		Path: p.name, Rate: rate, Latency: loadgen.Summarize(res.Latencies),
		Errors: res.Errors, FirstErr: res.FirstErr,
		SidecarCPU: float64(cpu) / float64(res.Elapsed),
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

func memoryRow(when string, plexus, peer []*Sidecar) MemoryRow {
	row := MemoryRow{When: when}
	for _, s := range plexus {
		u, _ := s.Usage()
		row.Plexus = append(row.Plexus, u)
	}
	for _, s := range peer {
		u, _ := s.Usage()
		row.Peer = append(row.Peer, u)
	}
	return row
}
