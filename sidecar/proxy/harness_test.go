package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// harness runs a Proxy on a loopback outbound listener whose "original
// destination" is whatever the test stores in dst (no iptables needed).
type harness struct {
	p    *Proxy
	reg  *prometheus.Registry
	addr string
	dst  atomic.Value // netip.AddrPort
}

func start(t *testing.T, mut func(*config.Config, *Options)) *harness { return startTB(t, mut) }

func startBench(b *testing.B) *harness { return startTB(b, nil) }

func startTB(t testing.TB, mut func(*config.Config, *Options)) *harness {
	t.Helper()
	cfg := config.Default()
	cfg.DetectTimeout = 300 * time.Millisecond
	h := &harness{reg: prometheus.NewRegistry()}
	level := slog.LevelError
	if os.Getenv("PLEXUS_TEST_DEBUG") != "" {
		level = slog.LevelDebug
	}
	if _, isB := t.(*testing.B); testing.Verbose() && !isB {
		level = slog.LevelDebug
	}
	opts := Options{
		Metrics: metrics.New(h.reg, 100),
		Log:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})),
		OrigDst: func(*net.TCPConn) (netip.AddrPort, error) { return h.dst.Load().(netip.AddrPort), nil },
	}
	if mut != nil {
		mut(&cfg, &opts)
	}
	opts.Config = cfg
	h.p = New(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	h.addr = ln.Addr().String()
	go h.p.Serve(ln, metrics.Outbound)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		h.p.Shutdown(ctx)
	})
	return h
}

func (h *harness) to(addr string) { h.dst.Store(netip.MustParseAddrPort(addr)) }

// client returns an HTTP client whose every connection goes to the proxy.
func (h *harness) client(h2 bool) *http.Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", h.addr)
		},
		Protocols: new(http.Protocols),
	}
	if h2 {
		tr.Protocols.SetUnencryptedHTTP2(true)
	} else {
		tr.Protocols.SetHTTP1(true)
	}
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// metric returns the sum of the samples of name whose labels include all of want.
func (h *harness) metric(t *testing.T, name string, want map[string]string) float64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return sumSamples(mfs, name, want)
}

// sumSamples adds the values (histograms: sample counts) of the series of
// family name whose labels include all of want.
func sumSamples(mfs []*dto.MetricFamily, name string, want map[string]string) float64 {
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			for k, v := range want {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

// eventually retries check until it passes or 5s pass.
func waitFor(t testing.TB, what string, check func() bool) {
	t.Helper()
	eventually.Within(t, 5*time.Second, what, check)
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// serveLoopback serves srv on a free loopback port until the test ends and
// returns its address. The caller sets srv's protocols.
func serveLoopback(t testing.TB, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}
