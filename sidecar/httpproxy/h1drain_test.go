package httpproxy

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// drainWoke reports whether p drains and none of its client connections
// still sits in an idle read Shutdown has yet to wake: a request sent now
// meets the draining answer, not a read that forwards it.
func drainWoke(p *Proxy) bool {
	s := &p.h1conns
	if !s.draining.Load() {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for hc := range s.set {
		if hc.idle.Load() {
			return false
		}
	}
	return true
}

// A draining fast path forwards nothing new. A meshed client's next
// request on an idle connection is answered 503 draining (its proxy then
// sends it elsewhere, whatever the method); a plaintext client's
// connection is closed as before.
func TestDrainRefusesMeshedClientsRequests(t *testing.T) {
	var hits atomic.Int32
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer up.Close()
	dst := netip.MustParseAddrPort(up.Listener.Addr().String())
	for _, meshed := range []bool{true, false} {
		hits.Store(0)
		p := New(Options{Direction: metrics.Inbound, Metrics: metrics.New(prometheus.NewRegistry(), 100), Log: testLog(),
			ConnectTimeout: time.Second, MaxIdleConnsPerHost: 4, ClientIdleTimeout: time.Minute})
		client, server := net.Pipe()
		go p.ServeHTTP1(ClientConn{Conn: server, Dst: dst, TLS: metrics.TLS{On: meshed}})
		br := bufio.NewReader(client)
		send := func() (*http.Response, error) {
			req, _ := http.NewRequest("POST", "http://web/", nil)
			if err := req.Write(client); err != nil {
				return nil, err
			}
			return http.ReadResponse(br, req)
		}
		if res, err := send(); err != nil || res.StatusCode != 200 {
			t.Fatalf("meshed=%v: first request: %v %v", meshed, res, err)
		}
		drained := make(chan time.Duration)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			t0 := time.Now()
			p.Shutdown(ctx)
			drained <- time.Since(t0)
		}()
		eventually.Within(t, 2*time.Second, "Shutdown to wake the idle connection", func() bool { return drainWoke(p) })
		res, err := send()
		switch {
		case meshed && (err != nil || res.StatusCode != 503 || res.Header.Get(ErrorHeader) != ReasonDraining || !res.Close):
			t.Errorf("meshed: request while draining: %v %v, want 503 %s with Connection: close", res, err, ReasonDraining)
		case !meshed && err == nil:
			t.Errorf("plaintext: request while draining answered %d, want the connection closed", res.StatusCode)
		}
		if n := hits.Load(); n != 1 {
			t.Errorf("meshed=%v: the application got %d requests, want 1 (nothing forwarded while draining)", meshed, n)
		}
		if el := <-drained; el > DrainRefuseWindow+time.Second {
			t.Errorf("meshed=%v: Shutdown took %s", meshed, el)
		}
		client.Close()
	}
}
