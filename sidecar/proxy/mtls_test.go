package proxy

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/discovery"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

// Identities of the test pods (also used by the netns tests).
var (
	clientPodID = spiffe.New("cluster.local", "shop", "client")
	serverPodID = spiffe.New("cluster.local", "shop", "server")
)

// staticResolver sends every destination to one endpoint.
type staticResolver struct{ ep discovery.Endpoint }

func (r staticResolver) PickHTTP(context.Context, netip.AddrPort, *routes.Backend) (discovery.Pick, error) {
	return discovery.Pick{Endpoint: r.ep}, nil
}

func (r staticResolver) Opaque(context.Context, netip.AddrPort) bool { return r.ep.Opaque }

func (r staticResolver) PickConn(context.Context, netip.AddrPort) (discovery.Pick, error) {
	return discovery.Pick{Endpoint: r.ep}, nil
}

func (r staticResolver) Policy(context.Context, netip.AddrPort) *routes.Table {
	return routes.Default()
}

func (staticResolver) Unavailable(*routes.Backend) bool { return false }

// TestLoopbackMTLSChain runs the whole mesh path on loopback without
// root: an outbound Proxy (resolver → endpoint with an identity) speaks
// mTLS to an inbound Proxy, which terminates it and forwards to the app.
func TestLoopbackMTLSChain(t *testing.T) {
	ca := testpki.New("mesh")
	app := serveLoopback(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "chain ok") })})
	appAddr := netip.MustParseAddrPort(app)

	inReg := prometheus.NewRegistry()
	_, inAddr := serveInbound(t, inReg, appAddr, func(o *Options) { o.Certs = ca.Source(serverPodID) })

	for _, tc := range []struct {
		name   string
		id     spiffe.ID
		status int
		tls    string
	}{
		{"mtls", serverPodID, 200, "true"},
		{"wrong-identity", spiffe.New("cluster.local", "shop", "other"), 502, "true"},
		{"plaintext-endpoint", spiffe.ID{}, 200, "false"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := start(t, func(_ *config.Config, o *Options) {
				o.Certs = ca.Source(clientPodID)
				o.Resolver = staticResolver{discovery.Endpoint{Addr: inAddr, Identity: tc.id}}
			})
			out.to(app) // the original destination; the resolver overrides it
			res, err := out.client(false).Get("http://web/")
			if err != nil {
				t.Fatal(err)
			}
			body := readAll(t, res.Body)
			res.Body.Close()
			if res.StatusCode != tc.status || (tc.status == 200 && body != "chain ok") {
				t.Fatalf("got %d %q", res.StatusCode, body)
			}
			want := map[string]string{"direction": "outbound", "tls": tc.tls}
			if tc.tls == "true" {
				want["server_id"] = tc.id.String()
			}
			if got := out.metric(t, "request_total", want); got != 1 {
				t.Errorf("outbound request_total%v = %v", want, got)
			}
		})
	}
	mfs, err := inReg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if got := sumSamples(mfs, "request_total", map[string]string{"direction": "inbound", "tls": "true", "client_id": clientPodID.String()}); got != 1 {
		t.Errorf("inbound request_total{tls, client_id} = %v, want 1 (the mtls case)", got)
	}
	if got := sumSamples(mfs, "request_total", map[string]string{"direction": "inbound", "tls": "false"}); got != 1 {
		t.Errorf("inbound request_total{tls=false} = %v, want 1 (the plaintext endpoint)", got)
	}
}

// serveInbound runs an inbound Proxy on loopback whose every connection
// is for dst, metrics on reg, until the test ends.
func serveInbound(t *testing.T, reg *prometheus.Registry, dst netip.AddrPort, mut func(*Options)) (*Proxy, netip.AddrPort) {
	return serveInboundTB(t, reg, dst, mut)
}

// serveInboundTB is serveInbound for tests and benchmarks.
func serveInboundTB(t testing.TB, reg *prometheus.Registry, dst netip.AddrPort, mut func(*Options)) (*Proxy, netip.AddrPort) {
	t.Helper()
	cfg := config.Default()
	cfg.DetectTimeout = 300 * time.Millisecond
	opts := Options{
		Config: cfg, Metrics: metrics.New(reg, 100), Log: slog.New(slog.DiscardHandler),
		OrigDst: func(*net.TCPConn) (netip.AddrPort, error) { return dst, nil },
	}
	mut(&opts)
	in := New(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go in.Serve(ln, metrics.Inbound)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		in.Shutdown(ctx)
	})
	return in, netip.MustParseAddrPort(ln.Addr().String())
}
