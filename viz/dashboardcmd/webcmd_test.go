package dashboardcmd

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/control/component"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

func TestParseFlagsDefaults(t *testing.T) {
	cfg, err := ParseFlags(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Addr != "127.0.0.1:8084" || cfg.PrometheusURL != vizquery.DefaultURL || vizquery.DefaultURL != "http://plexus-prometheus.plexus-viz.svc:9090" ||
		cfg.Web.ControlNamespace != "plexus-system" || cfg.Kubeconfig != "" || cfg.Web.MaxTapStreams != 4 {
		t.Errorf("defaults %+v", cfg)
	}
	cfg, err = ParseFlags([]string{"--allowed-hosts", `dash\.example\.com`, "--control-namespace", "cp", "--max-tap-streams", "2"}, io.Discard)
	if err != nil || cfg.Web.AllowedHosts != `dash\.example\.com` || cfg.Web.ControlNamespace != "cp" || cfg.Web.MaxTapStreams != 2 {
		t.Errorf("cfg %+v err %v", cfg, err)
	}
}

func TestParseFlagsNamesEveryProblem(t *testing.T) {
	_, err := ParseFlags([]string{"--addr", "nowhere", "--prometheus-url", "ftp://x", "--allowed-hosts", "(", "--max-tap-streams", "0", "--control-namespace", ""}, io.Discard)
	for _, w := range []string{"--addr", "--prometheus-url", "allowed hosts", "max tap streams", "control namespace"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("err %v lacks %q", err, w)
		}
	}
	if _, err := ParseFlags([]string{"extra"}, io.Discard); err == nil {
		t.Error("a stray argument was accepted")
	}
}

// writerFunc is an io.Writer calling itself with each write.
type writerFunc func(p []byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

func TestServeStopsWithTheContext(t *testing.T) {
	cfg, err := ParseFlags([]string{"--addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	serving := make(chan struct{})
	var once sync.Once
	log := slog.New(slog.NewTextHandler(writerFunc(func(p []byte) {
		if bytes.Contains(p, []byte("msg=serving")) {
			once.Do(func() { close(serving) })
		}
	}), nil))
	go func() {
		done <- serve(ctx, cfg, component.Registry(), http.NotFoundHandler(), log)
	}()
	select {
	case <-serving: // both listeners open, the servers started
	case err := <-done:
		t.Fatalf("serve returned before it served: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not start")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
}
