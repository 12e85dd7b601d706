package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/plexus-mesh/plexus/control/api/tappb"
	"github.com/plexus-mesh/plexus/control/spiffe"
	"github.com/plexus-mesh/plexus/sidecar/internal/destinationtest"
	"github.com/plexus-mesh/plexus/sidecar/internal/testpki"
	"github.com/plexus-mesh/plexus/sidecar/mtls"
)

// tapID is the tap service's identity, the only one a proxy's tap port
// serves (config.TapID with the defaults).
var tapID = spiffe.New("cluster.local", "plexus-viz", "plexus-tap")

// openTap opens a tap session on p's tap port (4190, from inside its
// namespace) as the tap service. The returned stream is not read: a
// stalled tapper. Small fixed windows keep the client from buffering.
func openTap(t testing.TB, p *pod, ca *testpki.CA, req *tappb.ObserveRequest) tappb.Tap_ObserveClient {
	t.Helper()
	cfg := mtls.ClientConfig(ca.Source(tapID), serverPodID)
	cc, err := grpc.NewClient("passthrough:///127.0.0.1:4190",
		grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		grpc.WithInitialWindowSize(64<<10), grpc.WithInitialConnWindowSize(64<<10),
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) { return p.dial(ctx, addr) }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); cc.Close() })
	stream, err := tappb.NewTapClient(cc).Observe(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the tap session to open", func() bool {
		return sumSamples(p.scrapeTB(t), "tap_sessions", nil) == 1
	})
	return stream
}

// TestMeshTapStalledReader: a tap session whose reader is stalled while
// the proxy serves thousands of requests costs that proxy at most 5 MB of
// RSS; the excess events are dropped and counted, and requests keep
// flowing. A session that reads sees the requests.
func TestMeshTapStalledReader(t *testing.T) {
	m, dest, ca := newMTLSMeshCA(t, nil)
	tgt := fmt.Sprintf("%s:8080", serverIP)
	dest.Set(tgt, destinationtest.Add(destinationtest.Endpoint(tgt, serverPodID)))
	body := strings.Repeat("x", 1024)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(m.server.listen(t, ":8080"))
	defer srv.Close()
	run := func(n int) {
		var wg sync.WaitGroup
		for w := range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c := m.client.httpClient(false)
				for i := w; i < n; i += 8 {
					res, err := c.Get("http://" + tgt + "/tapped")
					if err != nil {
						t.Error(err)
						return
					}
					io.Copy(io.Discard, res.Body)
					res.Body.Close()
					if res.StatusCode != 200 {
						t.Errorf("status %d", res.StatusCode)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	run(20000) // warm up: the same work untapped, so that what follows measures the tap
	pid := m.server.cmd.Process.Pid
	before := rssMB(t, pid)

	// A tapper that reads a few events, then stops reading.
	stream := openTap(t, m.server, ca, &tappb.ObserveRequest{MaxRps: 1e6})
	run(10)
	ev, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if rs := ev.GetRequestStart(); rs == nil || rs.Path != "/tapped" || ev.Direction != "inbound" || ev.SourceIdentity != clientPodID.String() {
		t.Fatalf("first tap event = %v", ev)
	}
	run(20000)
	after := rssMB(t, pid)
	dropped := sumSamples(m.server.scrapeTB(t), "tap_events_dropped_total", nil)
	t.Logf("server proxy RSS %.1f MB before the stalled tap, %.1f MB after 20,000 tapped requests; %v events dropped", before, after, dropped)
	if dropped < 20000 {
		t.Errorf("tap_events_dropped_total = %v after 60,000 events to a stalled tapper, want most of them dropped", dropped)
	}
	if after-before > 5 {
		t.Errorf("a stalled tapper raised the proxy's RSS by %.1f MB, want at most 5", after-before)
	}
}
