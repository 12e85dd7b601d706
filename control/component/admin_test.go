package component

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/plexus-mesh/plexus/testsupport/tcptest"
)

func TestAdminHandler(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "plexus_test_total", Help: "x"})
	reg.MustRegister(c)
	c.Inc()
	var reason error = errors.New("no certificate yet")
	srv := httptest.NewServer(AdminHandler(reg, nil, func() error { return reason }))
	defer srv.Close()
	get := func(path string) (int, string) {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/ready"); code != 503 || !strings.Contains(body, "no certificate yet") {
		t.Errorf("/ready while not ready = %d %q", code, body)
	}
	reason = nil
	if code, _ := get("/ready"); code != 200 {
		t.Errorf("/ready when ready = %d", code)
	}
	if code, _ := get("/live"); code != 200 {
		t.Errorf("/live = %d", code)
	}
	if _, body := get("/metrics"); !strings.Contains(body, "plexus_test_total 1") {
		t.Errorf("/metrics lacks the registry's counter:\n%s", body)
	}
}

// TestAdminBounded: an admin port holds at most AdminMaxPerSource
// connections from one address; one more is closed at once and counted
// in plexus_admin_connections_refused_total, and another address is still
// served.
func TestAdminBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	ln := tcptest.NewListener()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Admin(ln, reg).Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	src := func(ip string) netip.AddrPort { return netip.AddrPortFrom(netip.MustParseAddr(ip), 40000) }
	get := func(c net.Conn) (string, error) {
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.WriteString(c, "GET /live HTTP/1.1\r\nHost: admin\r\n\r\n"); err != nil {
			return "", err
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	for range AdminMaxPerSource {
		if body, err := get(ln.Dial(src("10.0.0.1"))); err != nil || body != "live\n" {
			t.Fatalf("within the bounds: %q %v", body, err)
		}
	}
	if body, err := get(ln.Dial(src("10.0.0.1"))); err == nil {
		t.Errorf("connection %d from one address served: %q", AdminMaxPerSource+1, body)
	}
	if body, err := get(ln.Dial(src("10.0.0.2"))); err != nil || body != "live\n" {
		t.Errorf("another address: %q %v", body, err)
	}
	if got := testutil.ToFloat64(refusedCounter(t, reg)); got != 1 {
		t.Errorf("plexus_admin_connections_refused_total = %v, want 1", got)
	}
}

func refusedCounter(t *testing.T, reg *prometheus.Registry) prometheus.Collector {
	t.Helper()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "plexus_admin_connections_refused_total",
		Help: "Connections to the admin port reset at once: it held its most, in all or from that address."})
	var already prometheus.AlreadyRegisteredError
	if err := reg.Register(c); !errors.As(err, &already) {
		t.Fatalf("the refusals counter is not registered: %v", err)
	}
	return already.ExistingCollector
}
