package proxy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

func freePort(t *testing.T) uint16 {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return uint16(ln.Addr().(*net.TCPAddr).Port)
}

func TestRunAdminAndShutdown(t *testing.T) {
	cfg := config.Default()
	cfg.InboundPort, cfg.OutboundPort, cfg.AdminPort = freePort(t), freePort(t), freePort(t)
	cfg.ShutdownGrace = 2 * time.Second
	done := make(chan error, 1)
	go func() {
		done <- Run(context.Background(), RunOptions{Config: cfg, Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	}()
	base := "http://127.0.0.1:" + strconv.Itoa(int(cfg.AdminPort))
	waitFor(t, "/ready", func() bool {
		res, err := http.Get(base + "/ready")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == 200
	})
	res, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if res.StatusCode != 200 {
		t.Fatalf("/metrics = %d", res.StatusCode)
	}
	res, err = http.Post(base+"/shutdown", "", nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("/shutdown: %v %v", res, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after /shutdown")
	}
}

func TestRunRejectsBadConfig(t *testing.T) {
	cfg := config.Default()
	cfg.AdminPort = cfg.InboundPort
	err := Run(context.Background(), RunOptions{Config: cfg, Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	if err == nil || !strings.Contains(err.Error(), config.EnvAdminPort) {
		t.Fatalf("err = %v", err)
	}
}

// TestRunIdentityNotWired: identity configured without an identity client
// is a start-up error, never a silent fallback to plaintext.
func TestRunIdentityNotWired(t *testing.T) {
	cfg := config.Default()
	cfg.InboundPort, cfg.OutboundPort, cfg.AdminPort = freePort(t), freePort(t), freePort(t)
	cfg.IdentityAddr, cfg.PodNamespace, cfg.ServiceAccount = "identity:8080", "shop", "web"
	cfg.TrustAnchorsPEM = string(testpki.New("t").AnchorPEM())
	err := Run(context.Background(), RunOptions{Config: cfg, Log: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	if !errors.Is(err, ErrIdentityNotWired) || !strings.Contains(err.Error(), "not wired") {
		t.Fatalf("err = %v, want ErrIdentityNotWired", err)
	}
}
