package httpproxy

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// What the route stage costs when it does nothing but route: the default
// table on the fast path, and a retry policy that never retries on the
// net/http path.

const rtOK = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"

// rtQuickDial connects to an upstream, over net.Pipe, that answers every
// bodiless request rtOK, allocating (almost) nothing.
func rtQuickDial(context.Context, netip.AddrPort) (net.Conn, error) {
	c, s := net.Pipe()
	go func() {
		defer s.Close()
		r := bufio.NewReaderSize(s, 4096)
		for {
			line, err := r.ReadSlice('\n')
			if err != nil {
				return
			}
			if len(line) <= 2 { // the blank line ending a head
				if _, err := io.WriteString(s, rtOK); err != nil {
					return
				}
			}
		}
	}()
	return c, nil
}

// rtProxy is a Proxy with table (nil: Options.Routes nil),
// instrumented on a fresh registry.
func rtProxy(table *routes.Table) *Proxy {
	m := metrics.New(prometheus.NewRegistry(), 100)
	opts := Options{
		Direction: metrics.Outbound, Metrics: m, Log: testLog(),
		ConnectTimeout: time.Second, IdleConnTimeout: time.Minute, MaxIdleConnsPerHost: 4,
		ReadHeaderTimeout: time.Second, ClientIdleTimeout: time.Minute, MaxInformational: 5,
		Dial: rtQuickDial,
	}
	if table != nil {
		InstrumentRoutes(m, table)
		opts.Routes = func(context.Context, netip.AddrPort) *routes.Table { return table }
	}
	return New(opts)
}

// rtPipeClient is a client connection served by p's fast path over
// net.Pipe, forwarding to dst.
func rtPipeClient(tb testing.TB, p *Proxy, dst netip.AddrPort) net.Conn {
	c, s := net.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if h := p.ServeHTTP1(ClientConn{Conn: s, Dst: dst}); h != nil {
			tb.Error("the fast path handed off a plain GET")
			h.Close()
		}
	}()
	tb.Cleanup(func() {
		c.Close()
		<-done
		p.CloseIdle()
	})
	return c
}

func BenchmarkRouteDefault(b *testing.B) {
	dst := netip.MustParseAddrPort("10.0.0.1:80")
	req := []byte("GET /path HTTP/1.1\r\nHost: web.ns\r\nUser-Agent: bench\r\n\r\n")
	for _, bc := range []struct {
		name  string
		table *routes.Table
	}{{"routes=nil", nil}, {"routes=default", routes.Default()}} {
		b.Run(bc.name, func(b *testing.B) {
			c := rtPipeClient(b, rtProxy(bc.table), dst)
			buf := make([]byte, len(rtOK))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(req); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, buf); err != nil || string(buf) != rtOK {
					b.Fatalf("%q %v", buf, err)
				}
			}
		})
	}
}

// rtDiscard is a ResponseWriter that keeps the status and discards the body.
type rtDiscard struct {
	h      http.Header
	status int
	body   bytes.Buffer
}

func (w *rtDiscard) Header() http.Header         { return w.h }
func (w *rtDiscard) WriteHeader(s int)           { w.status = s }
func (w *rtDiscard) Write(p []byte) (int, error) { return w.body.Write(p) }

// rtServeGET returns a function that serves one GET through p.ServeHTTP
// (the net/http engine) to dst and checks its answer.
func rtServeGET(tb testing.TB, p *Proxy, dst netip.AddrPort) func() {
	r, err := http.NewRequestWithContext(WithDestination(context.Background(), dst), "GET", "http://web.ns/path", nil)
	if err != nil {
		tb.Fatal(err)
	}
	r.RequestURI, r.Host = "/path", "web.ns"
	w := &rtDiscard{h: http.Header{}}
	tb.Cleanup(p.CloseIdle)
	return func() {
		clear(w.h)
		w.body.Reset()
		p.ServeHTTP(w, r)
		if w.status != 200 || w.body.String() != "ok" {
			tb.Fatalf("%d %q", w.status, w.body.String())
		}
	}
}

// rtRetryTables: one route, one backend (the destination itself), with
// and without a retry policy (5xx, limit 3, the default budget).
func rtRetryTables(tb testing.TB) (withRetry, without *routes.Table) {
	compile := func(rp *pb.RetryPolicy) *routes.Table {
		t, err := routes.Compile(rtPolicy(rtRoute("web", &pb.OutboundRule{
			Backends: []*pb.Backend{{Ref: &pb.ResourceRef{Kind: "Service", Namespace: "ns", Name: "web", Port: 80}, Weight: 1}},
			Retry:    rp,
		})))
		if err != nil {
			tb.Fatal(err)
		}
		return t
	}
	return compile(&pb.RetryPolicy{Limit: 3, HttpStatuses: []*pb.StatusRange{{Min: 500, Max: 599}}}), compile(nil)
}

func BenchmarkRouteRetryNotRetrying(b *testing.B) {
	dst := netip.MustParseAddrPort("10.0.0.1:80")
	withRetry, without := rtRetryTables(b)
	for _, bc := range []struct {
		name  string
		table *routes.Table
	}{{"retry=none", without}, {"retry=5xx", withRetry}} {
		b.Run(bc.name, func(b *testing.B) {
			serve := rtServeGET(b, rtProxy(bc.table), dst)
			b.ReportAllocs()
			for b.Loop() {
				serve()
			}
		})
	}
}

// A retry policy that never retries allocates nothing on the way of a
// request that succeeds.
func TestRouteRetryNotRetryingAllocatesNothing(t *testing.T) {
	dst := netip.MustParseAddrPort("10.0.0.1:80")
	withRetry, without := rtRetryTables(t)
	allocs := func(table *routes.Table) float64 {
		serve := rtServeGET(t, rtProxy(table), dst)
		for range 50 {
			serve()
		}
		return testing.AllocsPerRun(300, serve)
	}
	base, retry := allocs(without), allocs(withRetry)
	t.Logf("allocations per request: %v without a retry policy, %v with one", base, retry)
	if retry > base {
		t.Errorf("a retry policy that does not retry costs %v allocations per request more", retry-base)
	}
}
