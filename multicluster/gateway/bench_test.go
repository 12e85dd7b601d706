package gateway

import (
	"context"
	"io"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/mesh/identity/mtls"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/passthrough"
	"github.com/plexus-mesh/plexus/testsupport/tcptest"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

// BenchmarkGatewayRoundTrip: one 1 KiB request and its 1 KiB answer over
// a mesh mTLS connection on loopback, directly and through the gateway
// (which passes the session through). The difference of ns/op is the
// latency the gateway adds per round trip; that of cpu-ns/op (the
// process's CPU, client, server and gateway together) times 1,000 its CPU
// per 1,000 requests (integration/BENCHMARKS.md).
func BenchmarkGatewayRoundTrip(b *testing.B) {
	ca := testpki.New("mesh")
	server := spiffe.New("b.cluster.local", "shop", "web")
	client := spiffe.New("cluster.local", "shop", "client")
	target, _ := tcptest.Serve(b, "127.0.0.1:0", func(c net.Conn) {
		tc, _, err := mtls.Server(context.Background(), c, mtls.ServerConfig(ca.Source(server)))
		if err != nil {
			return
		}
		buf := make([]byte, 1024)
		for {
			if _, err := io.ReadFull(tc, buf); err != nil {
				return
			}
			if _, err := tc.Write(buf); err != nil {
				return
			}
		}
	})
	g, err := New(Options{Allowed: func(netip.AddrPort) error { return nil }, Registry: prometheus.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	gln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = g.Serve(ctx, gln) }()
	gw := gln.Addr().(*net.TCPAddr).AddrPort()

	for _, bc := range []struct {
		name string
		via  netip.AddrPort
	}{{"direct", netip.AddrPort{}}, {"gateway", gw}} {
		b.Run(bc.name, func(b *testing.B) {
			dctx, dcancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer dcancel()
			c, err := passthrough.Dial(dctx, dial, bc.via, target)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			tc, err := mtls.Client(dctx, c, ca.Source(client), server)
			if err != nil {
				b.Fatal(err)
			}
			buf := make([]byte, 1024)
			cpu0 := cpuNanos()
			b.ResetTimer()
			for range b.N {
				if _, err := tc.Write(buf); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(tc, buf); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(cpuNanos()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuNanos is the process's user and system CPU time so far.
func cpuNanos() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Utime.Nano() + ru.Stime.Nano()
}
