package vizbrowser

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/viz/dashboard"
	"github.com/plexus-mesh/plexus/viz/dashboard/webtest"
)

// TestDashboardInChromium runs the driver on a dashboard served in
// process from fake sources shaped like the demo. Screenshots go to
// $VIZBROWSER_ARTIFACTS when set.
func TestDashboardInChromium(t *testing.T) {
	if err := Available(""); err != nil {
		t.Skipf("skipped: %v", err)
	}
	s, err := dashboard.New(dashboard.DefaultConfig(), webtest.Sources(100*time.Millisecond), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := dashboard.NewHTTPServer("", s.Handler())
	go srv.Serve(lis)
	defer srv.Close()

	dir := os.Getenv("VIZBROWSER_ARTIFACTS")
	if dir == "" {
		dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		BaseURL:      "http://" + lis.Addr().String(),
		Namespace:    webtest.Namespace,
		Workload:     "Deployment/web",
		MinWorkloads: len(webtest.Workloads),
		Edges:        webtest.MeshedEdges,
		TapWithin:    10 * time.Second,
		TapRows:      3,
		// The fake tap's requests all come from load.
		TapFrom:         "app=load",
		TapFromWorkload: webtest.Namespace + "/load",
		ArtifactsDir:    dir,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Workloads) != len(webtest.Workloads) {
		t.Errorf("workload rows %+v", res.Workloads)
	}
	for _, w := range res.Workloads {
		if w.SuccessRate == nil || *w.SuccessRate != 0.995 || w.RPS == nil || *w.RPS != 10 || w.P50 == nil || *w.P50 != 3 || w.P99 == nil || *w.P99 != 19 {
			t.Errorf("row %s: %+v", w.Workload, w.Cells)
		}
	}
	if len(res.Edges) != 4 || res.TapRows < 3 || len(res.Screenshots) != 7 {
		t.Errorf("edges %q, tap rows %d, screenshots %v", res.Edges, res.TapRows, res.Screenshots)
	}
	for name, f := range res.Screenshots {
		if st, err := os.Stat(f); err != nil || st.Size() < 1000 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}
}
