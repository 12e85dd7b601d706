package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// TestInboundDialsTheApplicationWithDialInbound: the inbound side opens
// every connection to the application, HTTP and opaque, with DialInbound
// (bound to the inbound source in production), and the outbound side
// never does: an inbound dial that is not bound would be taken for a
// self-call and loop.
func TestInboundDialsTheApplicationWithDialInbound(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "app") }))
	defer app.Close()
	appAddr := netip.MustParseAddrPort(app.Listener.Addr().String())
	ln := banner(t)
	bannerAddr := netip.MustParseAddrPort(ln.Addr().String())

	var inbound, outbound atomic.Int64
	counting := func(n *atomic.Int64) func(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
		return func(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
			n.Add(1)
			return (&net.Dialer{}).DialContext(ctx, "tcp", dst.String())
		}
	}
	serve := func(dir string, dst netip.AddrPort, opaque bool) string {
		cfg := config.Default()
		cfg.DetectTimeout = 300 * time.Millisecond
		cfg.OpaquePorts = config.PortSet{}
		if opaque {
			cfg.OpaquePorts.Add(dst.Port())
		}
		p := New(Options{
			Config: cfg, Metrics: metrics.New(prometheus.NewRegistry(), 100), Log: slog.New(slog.DiscardHandler),
			OrigDst:     func(*net.TCPConn) (netip.AddrPort, error) { return dst, nil },
			IsLocal:     func(netip.Addr) bool { return true },
			Dial:        counting(&outbound),
			DialInbound: counting(&inbound),
		})
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go p.Serve(l, dir)
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			p.Shutdown(ctx)
		})
		return l.Addr().String()
	}
	get := func(addr string) {
		t.Helper()
		c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		}}, Timeout: 5 * time.Second}
		res, err := c.Get("http://app/")
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 200 || string(b) != "app" {
			t.Fatalf("got %d %q", res.StatusCode, b)
		}
	}
	greet := func(addr string) {
		t.Helper()
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, len("220 hello\r\n"))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "220 hello\r\n" {
			t.Fatalf("greeting %q %v", buf, err)
		}
	}

	get(serve(metrics.Inbound, appAddr, false))
	greet(serve(metrics.Inbound, bannerAddr, true))
	if in, out := inbound.Load(), outbound.Load(); in != 2 || out != 0 {
		t.Errorf("inbound HTTP and opaque: %d dials with DialInbound and %d with Dial, want 2 and 0", in, out)
	}
	get(serve(metrics.Outbound, appAddr, false))
	greet(serve(metrics.Outbound, bannerAddr, true))
	if in, out := inbound.Load(), outbound.Load(); in != 2 || out != 2 {
		t.Errorf("outbound HTTP and opaque: %d dials with DialInbound and %d with Dial, want 2 and 2", in-2, out)
	}
}

// TestInboundSourceKeepsLoopbackApps: with an inbound source configured,
// an application on loopback (the proxy's unit tests, or an app the
// original destination names as 127.0.0.1) is dialled unbound and works.
func TestInboundSourceKeepsLoopbackApps(t *testing.T) {
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		io.WriteString(w, host)
	}))
	defer app.Close()
	reg := prometheus.NewRegistry()
	_, addr := serveInbound(t, reg, netip.MustParseAddrPort(app.Listener.Addr().String()), func(o *Options) {
		o.Config.InboundSource = []netip.Addr{netip.MustParseAddr("127.0.0.6"), netip.MustParseAddr("::1")}
		o.IsLocal = func(netip.Addr) bool { return true }
	})
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "tcp", addr.String())
	}}, Timeout: 5 * time.Second}
	res, err := c.Get("http://app/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "127.0.0.1" {
		t.Errorf("got %d, app saw peer %q; want 200 from 127.0.0.1 (unbound)", res.StatusCode, b)
	}
}
