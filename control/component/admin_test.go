package component

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
