package gateway

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plexus-mesh/plexus/mesh/identity/mtls"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/passthrough"
	"github.com/plexus-mesh/plexus/testsupport/tcptest"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

// startGateway serves a gateway on loopback that may reach allowed only.
func startGateway(t *testing.T, allowed netip.AddrPort) (netip.AddrPort, *Gateway) {
	t.Helper()
	return startGatewayReady(t, allowed, nil)
}

// startGatewayReady is startGateway whose readiness is ready.
func startGatewayReady(t *testing.T, allowed netip.AddrPort, ready func() error) (netip.AddrPort, *Gateway) {
	t.Helper()
	return startGatewayWith(t, Options{
		Ready: ready,
		Allowed: func(dst netip.AddrPort) error {
			if dst != allowed {
				return errors.New("not exported")
			}
			return nil
		},
		HeaderTimeout: 300 * time.Millisecond,
	})
}

// startGatewayWith serves a gateway of o on loopback until the test ends.
func startGatewayWith(t *testing.T, o Options) (netip.AddrPort, *Gateway) {
	t.Helper()
	o.Registry = prometheus.NewRegistry()
	g, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return ln.Addr().(*net.TCPAddr).AddrPort(), g
}

func dial(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", dst.String())
}

func count(g *Gateway, result string) float64 {
	return testutil.ToFloat64(g.metrics.connections.WithLabelValues(result))
}

// TestMeshTLSPassesThrough: a client proxy's mesh handshake goes through
// the gateway to the target, which sees the client's own identity (the
// gateway holds no certificate at all), and the client verifies the
// target's.
func TestMeshTLSPassesThrough(t *testing.T) {
	ca := testpki.New("mesh")
	client := spiffe.New("cluster.local", "shop", "client")
	server := spiffe.New("b.cluster.local", "shop", "web")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	seen := make(chan spiffe.ID, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		tc, peer, err := mtls.Server(context.Background(), c, mtls.ServerConfig(ca.Source(server)))
		if err != nil {
			t.Errorf("target's handshake: %v", err)
			seen <- spiffe.ID{}
			return
		}
		seen <- peer
		_, _ = io.Copy(tc, tc)
	}()
	target := ln.Addr().(*net.TCPAddr).AddrPort()
	gw, g := startGateway(t, target)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := passthrough.Dial(ctx, dial, gw, target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tc, err := mtls.Client(ctx, c, ca.Source(client), server)
	if err != nil {
		t.Fatalf("handshake through the gateway: %v", err)
	}
	if got := <-seen; got != client {
		t.Fatalf("target saw %v, want the client's own identity %v", got, client)
	}
	if _, err := tc.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(tc, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q, %v", buf, err)
	}
	if n := count(g, resultForwarded); n != 1 {
		t.Errorf("forwarded %v, want 1", n)
	}
}

// TestRefusesWhatItMayNotReach: a target that is not allowed, a missing
// or malformed header, a header that never comes (timeout) and a target
// that refuses: each connection is reset, counted, and nothing reaches a
// target.
func TestRefusesWhatItMayNotReach(t *testing.T) {
	refusing, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := refusing.Addr().(*net.TCPAddr).AddrPort()
	refusing.Close()
	gw, g := startGateway(t, down)
	other := netip.MustParseAddrPort("127.0.0.1:1")

	cases := []struct {
		name, result string
		send         func(c net.Conn) error
	}{
		{"a target not exported", resultRefused, func(c net.Conn) error {
			return passthrough.WriteHeader(c, netip.AddrPort{}, other)
		}},
		{"no header: a TLS ClientHello at once", resultBadHeader, func(c net.Conn) error {
			_, err := c.Write([]byte{0x16, 0x03, 0x01, 0x00, 0x05, 1, 2, 3, 4, 5})
			return err
		}},
		{"a PROXY v1 header", resultBadHeader, func(c net.Conn) error {
			_, err := io.WriteString(c, "PROXY TCP4 10.0.0.1 127.0.0.1 1234 1\r\n")
			return err
		}},
		{"nothing within the header timeout", resultBadHeader, func(net.Conn) error { return nil }},
		{"a target that refuses", resultUnreachable, func(c net.Conn) error {
			return passthrough.WriteHeader(c, netip.AddrPort{}, down)
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := count(g, tc.result)
			c, err := net.Dial("tcp", gw.String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := tc.send(c); err != nil {
				t.Fatal(err)
			}
			_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
			if n, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("read %d bytes, %v: want the connection reset", n, err)
			}
			if got := count(g, tc.result) - before; got != 1 {
				t.Errorf("%s counted %v times, want 1", tc.result, got)
			}
		})
	}
	if n := count(g, resultForwarded); n != 0 {
		t.Errorf("forwarded %v, want 0", n)
	}
}

// TestHealthCheckAnswersReadiness: a linked cluster's probe passes while
// the gateway is ready and fails (reset) while it is not; each is counted
// as a health check, none as forwarded.
func TestHealthCheckAnswersReadiness(t *testing.T) {
	var notReady atomic.Bool
	gw, g := startGatewayReady(t, netip.AddrPort{}, func() error {
		if notReady.Load() {
			return errors.New("caches not synced")
		}
		return nil
	})
	probe := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return passthrough.Probe(ctx, dial, gw)
	}
	if err := probe(); err != nil {
		t.Errorf("ready gateway: %v", err)
	}
	notReady.Store(true)
	if err := probe(); err == nil {
		t.Error("a gateway not ready passed its health check")
	}
	if n := count(g, resultHealth); n != 2 {
		t.Errorf("health checks counted %v, want 2", n)
	}
	if n := count(g, resultForwarded); n != 0 {
		t.Errorf("forwarded %v, want 0", n)
	}
}

// TestHalfClosedConnectionEnds: once the target has finished (closed its
// side) a client that stays silent loses the connection after the
// half-close timeout, and its slot with it.
func TestHalfClosedConnectionEnds(t *testing.T) {
	target, _ := tcptest.Serve(t, "127.0.0.1:0", func(c net.Conn) { _, _ = c.Write([]byte("bye")) })
	gw, g := startGatewayWith(t, Options{Allowed: func(netip.AddrPort) error { return nil }, HalfCloseTimeout: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := passthrough.Dial(ctx, dial, gw, target)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if b, err := io.ReadAll(c); err != nil || string(b) != "bye" {
		t.Fatalf("read %q, %v: want the target's bye, then EOF", b, err)
	}
	// The client never closes its side: the gateway ends it.
	start := time.Now()
	for testutil.ToFloat64(g.metrics.open) != 0 {
		if time.Since(start) > 5*time.Second {
			t.Fatal("the half-closed connection is still open after 5 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
