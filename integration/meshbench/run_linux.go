package meshbench

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/loadgen"
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

// peers are the peer proxies' commands, each from Debian.
var peers = []string{"nginx", "haproxy"}

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
	for _, p := range peers {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("meshbench: the peer proxy %s is not installed (make deps-bench): %w", p, err)
		}
	}
	return nil
}

// pair is one pair of sidecars, client side first.
type pair struct {
	name     string
	ports    map[string]int // the server port of each protocol it carries
	sidecars []*Sidecar
	// start is set for a plexus pair that takes turns with the other
	// build's pair (see turns_linux.go); last is its usage when last stopped.
	start func() ([]*Sidecar, error)
	last  []Usage
	// check, if set, proves that the pair carried the last request to
	// the port over mutual TLS.
	check func(port int) error
}

// path is one way from the client to the server in one protocol.
type path struct {
	name  string
	proto protocol
	port  int
	pair  *pair // nil for the direct path
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
	cp, err := startControlPlane(topo, cfg.LogDir)
	if err != nil {
		return nil, fmt.Errorf("the mTLS pair's control plane: %w", err)
	}
	defer cp.Close()
	certs, err := writePeerCerts(cfg.LogDir, cp.anchor, cp.issuer)
	if err != nil {
		return nil, err
	}

	pairs, err := startPairs(cfg, topo, cp, certs)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, p := range pairs {
			if p.start == nil {
				stopAll(p.sidecars)
			}
		}
	}()
	paths := meshPaths(pairs)
	rep := &Report{Duration: cfg.Duration}
	if cfg.BaselineBin != "" {
		rep.Notes = append(rep.Notes, turnsNote(cfg))
	}
	for _, p := range paths {
		err := p.in(topo, 1, func(do func(context.Context, int) error) error {
			if err := do(ctx, 0); err != nil {
				return err
			}
			if p.pair != nil && p.pair.check != nil {
				return p.pair.check(p.port)
			}
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("path %s (%s) does not work: %w", p.name, p.proto.name, err)
		}
	}

	rep.Memory = append(rep.Memory, memoryRow("idle", pairs))
	for i, rate := range cfg.Rates {
		results := make([]RateResult, len(paths))
		for _, j := range order(paths, i) {
			p := paths[j]
			err := p.in(topo, cfg.Workers, func(do func(context.Context, int) error) (err error) {
				results[j], err = measure(ctx, cfg, do, p, rate)
				return err
			})
			if err != nil {
				return nil, err
			}
		}
		rep.Rates = append(rep.Rates, results...)
		rep.Memory = append(rep.Memory, memoryRow(fmt.Sprintf("after %d req/s", rate), pairs))
	}
	rep.Throughput = make([]Throughput, len(paths))
	for _, j := range order(paths, len(cfg.Rates)) {
		p := paths[j]
		err := p.in(topo, cfg.Workers, func(do func(context.Context, int) error) error {
			// A pair taking turns starts cold: warm it as the fixed-rate
			// cells are.
			if cfg.Warmup > 0 {
				if _, err := loadgen.Run(ctx, loadgen.Config{Do: do, Rate: cfg.Rates[0], Duration: cfg.Warmup, Workers: cfg.Workers}); err != nil {
					return err
				}
			}
			rps, res, err := loadgen.Saturate(ctx, loadgen.Config{Do: do, Duration: cfg.SaturateFor, Workers: cfg.Workers})
			rep.Throughput[j] = Throughput{Path: p.name, Proto: p.proto.name, RPS: rps, Errors: res.Errors, FirstErr: res.FirstErr}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	return rep, nil
}

// startPairs starts every sidecar pair; with a baseline build the plexus
// pairs are only set up to take turns.
func startPairs(cfg Config, topo *Topology, cp *controlPlane, certs *PeerCerts) ([]*pair, error) {
	upstream := func(port int) string { return fmt.Sprintf("%s:%d", serverAddr.Addr(), port) }
	// peer starts pp's pair: the client side listens on each redirect's
	// outbound listener, the server side on its inbound one, both
	// forwarding to the redirect's server port.
	peer := func(pp peerProxy, h2 bool, certs *PeerCerts, redirects ...[3]int) func() ([]*Sidecar, error) {
		var out, in []route
		for _, r := range redirects {
			out = append(out, route{Listen: r[1], Upstream: upstream(r[0])})
			in = append(in, route{Listen: r[2], Upstream: upstream(r[0])})
		}
		return func() ([]*Sidecar, error) {
			return startPair(topo, func(netns string) (*Sidecar, error) {
				if netns == topo.ClientNetns {
					return pp.start(netns, out, h2, false, certs, cfg.LogDir)
				}
				return pp.start(netns, in, h2, true, certs, cfg.LogDir)
			})
		}
	}
	plain := plexusPair{outbound: plexusOutbound, inbound: plexusInbound, admin: 4191}
	mtls := plexusPair{outbound: plexusMTLSOutbound, inbound: plexusMTLSInbound, admin: 4192, env: func(netns string) []string {
		if netns == topo.ClientNetns {
			return cp.Env(clientPod)
		}
		return cp.Env(serverPod)
	}}
	plexus := func(bin string, pp plexusPair) func() ([]*Sidecar, error) {
		return func() ([]*Sidecar, error) {
			return startPair(topo, func(netns string) (*Sidecar, error) { return StartPlexus(bin, netns, cfg.LogDir, pp) })
		}
	}
	// Server ports by protocol: the Plexus pairs carry every port; each
	// peer pair carries one protocol family.
	plainPorts := map[string]int{protoHTTP1: portPlexus}
	mtlsPorts := map[string]int{protoHTTP1: portPlexusMTLS, h2c.name: portPlexusH2C, grpcUnary.name: portPlexusGRPC, grpcStreaming.name: portPlexusGRPC}
	pairs := []*pair{
		{name: "plexus", ports: plainPorts, start: plexus(cfg.ProxyBin, plain)},
		{name: "nginx", ports: map[string]int{protoHTTP1: portNginx},
			start: peer(nginx, false, nil, [3]int{portNginx, nginxOutbound, nginxInbound})},
		{name: "plexus-mtls", ports: mtlsPorts, start: plexus(cfg.ProxyBin, mtls), check: meshTLSCheck(topo, mtls)},
		{name: "nginx-mtls", ports: map[string]int{protoHTTP1: portNginxMTLS},
			start: peer(nginx, false, certs, [3]int{portNginxMTLS, nginxMTLSOutbound, nginxMTLSInbound}), check: refusesAnonymous(topo, certs, nginxMTLSInbound)},
		{name: "haproxy-mtls", ports: map[string]int{protoHTTP1: portHAProxyMTLS},
			start: peer(haproxy, false, certs, [3]int{portHAProxyMTLS, haproxyOutbound, haproxyInbound}), check: refusesAnonymous(topo, certs, haproxyInbound)},
		{name: "nginx-h2-mtls", ports: map[string]int{h2c.name: portNginxH2C, grpcUnary.name: portNginxGRPC, grpcStreaming.name: portNginxGRPC},
			start: peer(nginx, true, certs, [3]int{portNginxH2C, nginxH2COutbound, nginxH2CInbound}, [3]int{portNginxGRPC, nginxGRPCOutbound, nginxGRPCInbound}),
			check: refusesAnonymous(topo, certs, nginxH2CInbound)},
		{name: "haproxy-h2-mtls", ports: map[string]int{h2c.name: portHAProxyH2C, grpcUnary.name: portHAProxyGRPC, grpcStreaming.name: portHAProxyGRPC},
			start: peer(haproxy, true, certs, [3]int{portHAProxyH2C, haproxyH2COutbound, haproxyH2CInbound}, [3]int{portHAProxyGRPC, haproxyGRPCOutbound, haproxyGRPCInbound}),
			check: refusesAnonymous(topo, certs, haproxyH2CInbound)},
	}
	if cfg.BaselineBin != "" {
		pairs = append(pairs[:1], append([]*pair{{name: "plexus-before", ports: plainPorts, start: plexus(cfg.BaselineBin, plain)}}, pairs[1:]...)...)
		pairs = append(pairs[:4], append([]*pair{{name: "plexus-mtls-before", ports: mtlsPorts, start: plexus(cfg.BaselineBin, mtls), check: meshTLSCheck(topo, mtls)}}, pairs[4:]...)...)
	}
	for i, p := range pairs {
		if cfg.BaselineBin != "" && isPlexus(p.name) {
			continue // started for each of its cells
		}
		ss, err := p.start()
		if err != nil {
			for _, q := range pairs[:i] {
				stopAll(q.sidecars)
			}
			return nil, err
		}
		p.sidecars, p.start = ss, nil
	}
	return pairs, nil
}

// meshTLSCheck fails unless the server-side proxy of pp counted inbound
// requests to port over mTLS from the client pod's identity.
func meshTLSCheck(topo *Topology, pp plexusPair) func(port int) error {
	id := fmt.Sprintf(`client_id="%s"`, spiffe.New(spiffe.DefaultTrustDomain, benchNamespace, clientPod.name))
	return func(port int) error {
		target := fmt.Sprintf(`target_addr="%s:%d"`, serverAddr.Addr(), port)
		out, err := exec.Command("ip", "netns", "exec", topo.ServerNetns, "curl", "-fsS", fmt.Sprintf("http://127.0.0.1:%d/metrics", pp.admin)).Output()
		if err != nil {
			return fmt.Errorf("reading the server proxy's metrics: %w", err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "request_total{") && strings.Contains(line, `direction="inbound"`) &&
				strings.Contains(line, `tls="true"`) && strings.Contains(line, id) && strings.Contains(line, target) {
				return nil
			}
		}
		return fmt.Errorf("the server proxy counted no inbound request to %s over mTLS with %s", target, id)
	}
}

// refusesAnonymous fails unless a peer pair's inbound side, reached
// without a client certificate, refuses the request.
func refusesAnonymous(topo *Topology, certs *PeerCerts, inbound int) func(int) error {
	return func(int) error {
		anchors, err := os.ReadFile(certs.Anchors)
		if err != nil {
			return err
		}
		roots := x509.NewCertPool()
		roots.AppendCertsFromPEM(anchors)
		conn, err := topo.dial(context.Background(), "tcp", fmt.Sprintf("%s:%d", serverAddr.Addr(), inbound))
		if err != nil {
			return err
		}
		tc := tls.Client(conn, &tls.Config{RootCAs: roots, ServerName: certs.ServerName, NextProtos: []string{"http/1.1"}})
		defer tc.Close()
		tc.SetDeadline(time.Now().Add(5 * time.Second))
		// Under TLS 1.3 the client's handshake ends before the server
		// judges its (missing) certificate: it must succeed, so that the
		// refusal below is the server's verdict and not a bad setup.
		if err := tc.Handshake(); err != nil {
			return fmt.Errorf("TLS handshake with port %d: %w", inbound, err)
		}
		if _, err := io.WriteString(tc, "GET / HTTP/1.1\r\nHost: server\r\n\r\n"); err != nil {
			return nil // refused
		}
		res, err := http.ReadResponse(bufio.NewReader(tc), nil)
		if err != nil || res.StatusCode != http.StatusOK {
			return nil // a TLS alert, or nginx's 400 "No required SSL certificate"
		}
		return fmt.Errorf("port %d answered a client without a certificate: %s", inbound, res.Status)
	}
}

// meshPaths are the paths measured: for each protocol the direct path,
// then every pair that carries it.
func meshPaths(pairs []*pair) []*path {
	direct := map[string]int{protoHTTP1: portDirect, h2c.name: portDirectH2C, grpcUnary.name: portDirectGRPC, grpcStreaming.name: portDirectGRPC}
	var paths []*path
	for _, proto := range []protocol{http1, h2c, grpcUnary, grpcStreaming} {
		paths = append(paths, &path{name: "direct", proto: proto, port: direct[proto.name]})
		for _, p := range pairs {
			if port, ok := p.ports[proto.name]; ok {
				paths = append(paths, &path{name: p.name, proto: proto, port: port, pair: p})
			}
		}
	}
	return paths
}

func startPair(topo *Topology, start func(netns string) (*Sidecar, error)) ([]*Sidecar, error) {
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

func measure(ctx context.Context, cfg Config, do func(context.Context, int) error, p *path, rate int) (RateResult, error) {
	lc := loadgen.Config{Do: do, Rate: rate, Duration: cfg.Warmup, Workers: cfg.Workers}
	if cfg.Warmup > 0 {
		if _, err := loadgen.Run(ctx, lc); err != nil {
			return RateResult{}, err
		}
	}
	before := cpuOf(p.sidecars())
	lc.Duration = cfg.Duration
	res, err := loadgen.Run(ctx, lc)
	if err != nil {
		return RateResult{}, err
	}
	cpu := cpuOf(p.sidecars()) - before
	var perRequest time.Duration
	if n := len(res.Latencies) + res.Errors; n > 0 {
		perRequest = cpu / time.Duration(n)
	}
	return RateResult{
		Path: p.name, Proto: p.proto.name, Rate: rate, Latency: loadgen.Summarize(res.Latencies),
		Errors: res.Errors, FirstErr: res.FirstErr,
		SidecarCPU: float64(cpu) / float64(res.Elapsed), CPUPerRequest: perRequest,
	}, nil
}

func (p *path) sidecars() []*Sidecar {
	if p.pair == nil {
		return nil
	}
	return p.pair.sidecars
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

// memoryRow reads every pair's usage now, or for a pair taking turns,
// when it was last stopped.
func memoryRow(when string, pairs []*pair) MemoryRow {
	row := MemoryRow{When: when}
	for _, p := range pairs {
		us := p.last
		if p.start == nil {
			us = usageOf(p.sidecars)
		}
		row.Pairs = append(row.Pairs, PairUsage{Name: p.name, Sides: us})
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
