package proxy

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/testsupport/netnstest"
)

// childEnv makes the test binary act as plexus-proxy (see TestMain).
const childEnv = "PLEXUS_PROXY_TEST_CHILD"

// proxyUID is the UID the child drops to, which the OUTPUT rules exempt.
const proxyUID = 2102

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(runChild())
	}
	if c := os.Getenv(interopCaseEnv); c != "" {
		os.Exit(runInteropCase(c, os.Getenv(interopAddrEnv)))
	}
	os.Exit(m.Run())
}

// runChild is the proxy process of the netns tests: started as root by
// "ip netns exec", it drops to UID/GID 2102 like the real sidecar and runs
// exactly what main runs.
func runChild() int {
	if err := syscall.Setgroups(nil); err != nil {
		fmt.Fprintln(os.Stderr, "setgroups:", err)
		return 3
	}
	if err := syscall.Setgid(proxyUID); err != nil {
		fmt.Fprintln(os.Stderr, "setgid:", err)
		return 3
	}
	if err := syscall.Setuid(proxyUID); err != nil {
		fmt.Fprintln(os.Stderr, "setuid:", err)
		return 3
	}
	cfg, err := config.FromEnv(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: cfg.LogLevel}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	reg := prometheus.NewRegistry() // as main's
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	if err := Run(ctx, RunOptions{Config: cfg, Log: log, Registry: reg, NewIdentity: childIdentity}); err != nil {
		log.Error("run", "err", err)
		return 1
	}
	return 0
}

// pod is one test namespace with the mesh rules and a proxy process.
type pod struct {
	ns   *netnstest.NS
	cmd  *exec.Cmd
	logs *syncBuffer
	exit chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// startProxy applies the CNI-equivalent rules in ns, starts a proxy there
// and waits until it is ready.
func startProxy(t testing.TB, ns *netnstest.NS, env ...string) *pod {
	t.Helper()
	p := launchProxy(t, ns, true, env...)
	waitFor(t, "proxy ready in "+ns.Name, func() bool {
		res, err := p.admin("GET", "/ready")
		return err == nil && res == 200
	})
	return p
}

// launchProxy starts a proxy in ns, with or without the mesh rules, and
// does not wait for it.
func launchProxy(t testing.TB, ns *netnstest.NS, rules bool, env ...string) *pod {
	t.Helper()
	p := &pod{ns: ns, logs: &syncBuffer{}, exit: make(chan error, 1)}
	p.cmd = ns.Command(os.Args[0], "-test.run=^$")
	p.cmd.Env = append(os.Environ(),
		childEnv+"=1",
		"PLEXUS_PROXY_DETECT_TIMEOUT=500ms",
		"PLEXUS_PROXY_SHUTDOWN_GRACE=10s",
		"PLEXUS_PROXY_LOG_LEVEL=debug",
	)
	if rules {
		ns.Restore(t, false, netnstest.MeshRules(t, false, 4143, 4140, 4191, proxyUID))
		ns.Restore(t, true, netnstest.MeshRules(t, true, 4143, 4140, 4191, proxyUID))
		p.cmd.Env = append(p.cmd.Env, netnstest.InboundSourceEnv) // as the injector sets it with these rules
	}
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stdout, p.cmd.Stderr = p.logs, p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exit <- p.cmd.Wait() }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exit
		if t.Failed() {
			t.Logf("proxy logs in %s:\n%s", ns.Name, p.logs.String())
		}
	})
	waitFor(t, "admin listening in "+ns.Name, func() bool {
		_, err := p.admin("GET", "/live")
		return err == nil
	})
	return p
}

// dial opens a TCP connection from inside the pod's namespace.
func (p *pod) dial(ctx context.Context, addr string) (net.Conn, error) {
	var c net.Conn
	err := p.ns.Do(func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		return err
	})
	return c, err
}

// listen opens a listener inside the pod's namespace.
func (p *pod) listen(t testing.TB, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := p.ns.Do(func() (err error) { ln, err = net.Listen("tcp", addr); return err }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// httpClient returns a client whose connections start inside the pod, so
// the pod's OUTPUT rules redirect them to its proxy.
func (p *pod) httpClient(h2 bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) { return p.dial(ctx, addr) },
		Protocols:   new(http.Protocols),
	}
	if h2 {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	return &http.Client{Transport: tr, Timeout: 15 * time.Second}
}

// adminClient is httpClient without keep-alive, for one request to a
// proxy's admin port: each call's idle connection would otherwise hold
// one of the port's 64 slots until the proxy closes it.
func (p *pod) adminClient() *http.Client {
	c := p.httpClient(false)
	c.Transport.(*http.Transport).DisableKeepAlives = true
	return c
}

func (p *pod) admin(method, path string) (int, error) {
	req, _ := http.NewRequest(method, "http://127.0.0.1:4191"+path, nil)
	res, err := p.adminClient().Do(req)
	if err != nil {
		return 0, err
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// scrape reads the pod proxy's /metrics.
func (p *pod) scrape(t *testing.T) []*dto.MetricFamily { return p.scrapeTB(t) }

// scrapeTB is scrape for tests and benchmarks.
func (p *pod) scrapeTB(t testing.TB) []*dto.MetricFamily {
	t.Helper()
	res, err := p.adminClient().Get("http://127.0.0.1:4191/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	var out []*dto.MetricFamily
	for _, f := range fams {
		out = append(out, f)
	}
	return out
}

// mesh is two pods on a veth: client (10.250.5.1, fd00:250:5::1) and
// server (10.250.5.2, fd00:250:5::2).
type mesh struct {
	client, server *pod
}

const (
	serverIP  = "10.250.5.2"
	serverIP6 = "fd00:250:5::2"
)

// The addresses the inbound side dials the application from
// (netnstest.InboundSourceEnv): the peer an application behind a proxy
// sees, which only that proxy uses.
const (
	inboundSource  = "127.0.0.6"
	inboundSource6 = "::1"
)

func newMesh(t testing.TB) *mesh {
	return newTopology(t, true)
}

// newTopology builds the two namespaces; without proxies it installs no
// rules and starts nothing (the direct path, for benchmarks).
func newTopology(t testing.TB, proxies bool, env ...string) *mesh {
	t.Helper()
	netnstest.RequireRoot(t)
	a, b := netnstest.New(t, "client"), netnstest.New(t, "server")
	netnstest.Veth(t, a, "10.250.5.1/24", b, serverIP+"/24")
	a.Run(t, "ip", "addr", "add", "fd00:250:5::1/64", "dev", "va", "nodad")
	b.Run(t, "ip", "addr", "add", serverIP6+"/64", "dev", "vb", "nodad")
	if !proxies {
		return &mesh{client: &pod{ns: a}, server: &pod{ns: b}}
	}
	return &mesh{client: startProxy(t, a, env...), server: startProxy(t, b, env...)}
}

// peerRecorder answers body and remembers the last client address it saw
// (the server proxy's inbound source, when the mesh carried the request).
type peerRecorder struct {
	body string
	mu   sync.Mutex
	peer string
}

func (h *peerRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.mu.Lock()
	h.peer, _, _ = net.SplitHostPort(r.RemoteAddr)
	h.mu.Unlock()
	io.WriteString(w, h.body)
}

func (h *peerRecorder) last() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.peer
}
