package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/plexus-mesh/plexus/mesh/api/tappb"
	"github.com/plexus-mesh/plexus/mesh/identity/mtls"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/fakedestination"
	"github.com/plexus-mesh/plexus/testsupport/loadgen"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
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
	waitFor(t, "the tap session to open", func() bool {
		return sumSamples(p.scrapeTB(t), "tap_sessions", nil) == 1
	})
	return stream
}

// TestMeshTapStalledReader: a tap session whose reader is stalled while
// the proxy serves 1,000 requests a second costs that proxy at most 5 MB
// of peak RSS over the same load untapped; the excess events are dropped
// and counted, and requests keep flowing.
func TestMeshTapStalledReader(t *testing.T) {
	m, dest, ca := newMTLSMeshCA(t, nil)
	tgt := fmt.Sprintf("%s:8080", serverIP)
	dest.Set(tgt, fakedestination.Add(fakedestination.Endpoint(tgt, serverPodID)))
	body := strings.Repeat("x", 1024)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, body) })}
	go srv.Serve(m.server.listen(t, ":8080"))
	defer srv.Close()
	const rate = 1000
	// Open loop, one connection per worker; every response must be a 200.
	const workers = 32
	clients := make([]*http.Client, workers)
	for i := range clients {
		clients[i] = m.client.httpClient(false)
	}
	url := "http://" + tgt + "/tapped"
	load := func(what string, d time.Duration) int {
		r, err := loadgen.Run(context.Background(), loadgen.Config{Rate: rate, Duration: d, Workers: workers,
			Do: func(ctx context.Context, w int) error { return loadgen.Get(ctx, clients[w], url) }})
		if err != nil || r.Errors > 0 {
			t.Errorf("%s: %v; %d requests failed, the first: %v", what, err, r.Errors, r.FirstErr)
		}
		s := loadgen.Summarize(r.Latencies)
		t.Logf("%s: %d requests in %.1f s (%.0f/s), p99 %s from when each was due", what, len(r.Latencies), r.Elapsed.Seconds(), float64(len(r.Latencies))/r.Elapsed.Seconds(), s.P99)
		return len(r.Latencies)
	}
	pid := m.server.cmd.Process.Pid
	// A tap of one request, opened and closed, so that the tap's code is
	// paged in (about 1 MB of the binary) before anything is measured.
	prime := openTap(t, m.server, ca, &tappb.ObserveRequest{Limit: 1})
	load("tapped once", 10*time.Millisecond)
	for {
		if _, err := prime.Recv(); err != nil {
			break // the session ended at its limit
		}
	}
	waitFor(t, "the priming tap session to close", func() bool {
		return sumSamples(m.server.scrapeTB(t), "tap_sessions", nil) == 0
	})
	// The same load untapped, as long as the tapped load: the proxy's
	// peak RSS over each is compared.
	load("untapped warm-up", 3*time.Second)
	resetPeakRSS(t, pid)
	load("untapped", 10*time.Second)
	before := procStatusMB(t, pid, "VmHWM:")
	dropped0 := sumSamples(m.server.scrapeTB(t), "tap_events_dropped_total", nil)
	resetPeakRSS(t, pid)

	// A tapper that reads one event, then stops reading.
	stream := openTap(t, m.server, ca, &tappb.ObserveRequest{MaxRps: 1e6})
	load("tapped, first event", 100*time.Millisecond)
	ev, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if rs := ev.GetRequestStart(); rs == nil || rs.Path != "/tapped" || ev.Direction != "inbound" || ev.SourceIdentity != clientPodID.String() {
		t.Fatalf("first tap event = %v", ev)
	}
	done := load("tapped, reader stalled", 10*time.Second)
	after := procStatusMB(t, pid, "VmHWM:")
	events := sumSamples(m.server.scrapeTB(t), "tap_events_total", nil)
	dropped := sumSamples(m.server.scrapeTB(t), "tap_events_dropped_total", nil) - dropped0
	t.Logf("server proxy peak RSS %.1f MB untapped, %.1f MB with the stalled tap; %v events queued, %v dropped", before, after, events, dropped)
	// Each request is 3 events; the session's queue and the stream's
	// flow-control windows hold about 1,200 of them.
	if want := float64(3*done - 2000); dropped < want {
		t.Errorf("tap_events_dropped_total rose by %v after %d requests (%d events) to a stalled tapper, want at least %v", dropped, done, 3*done, want)
	}
	if after-before > 5 {
		t.Errorf("a stalled tapper raised the proxy's peak RSS by %.1f MB, want at most 5", after-before)
	}
}

// resetPeakRSS starts pid's peak RSS (VmHWM) afresh from its RSS now.
func resetPeakRSS(t *testing.T, pid int) {
	t.Helper()
	if err := os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the proxy's peak RSS (Linux 4.0 or later): %v", err)
	}
}
