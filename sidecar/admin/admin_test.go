package admin

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestAdmin(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "request_total", Help: "h"})
	reg.MustRegister(c)
	c.Add(3)
	var notReady error = errors.New("listeners not up")
	shutdowns := 0
	h := Handler(Options{Gatherer: reg, Ready: func() error { return notReady }, Shutdown: func() { shutdowns++ }})
	do := func(method, path, remote string) (int, string) {
		r := httptest.NewRequest(method, path, nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Code, string(b)
	}
	if code, _ := do("GET", "/live", "10.0.0.1:1"); code != 200 {
		t.Errorf("/live = %d", code)
	}
	if code, body := do("GET", "/ready", "10.0.0.1:1"); code != 503 || !strings.Contains(body, "listeners not up") {
		t.Errorf("/ready = %d %q", code, body)
	}
	notReady = nil
	if code, _ := do("GET", "/ready", "10.0.0.1:1"); code != 200 {
		t.Errorf("/ready = %d after ready", code)
	}
	if code, body := do("GET", "/metrics", "10.0.0.1:1"); code != 200 || !strings.Contains(body, "request_total 3") {
		t.Errorf("/metrics = %d %q", code, body)
	}
	if code, _ := do("POST", "/shutdown", "10.0.0.1:1"); code != http.StatusForbidden || shutdowns != 0 {
		t.Errorf("/shutdown from pod network = %d (shutdowns %d)", code, shutdowns)
	}
	if code, _ := do("GET", "/shutdown", "127.0.0.1:1"); code != http.StatusMethodNotAllowed || shutdowns != 0 {
		t.Errorf("GET /shutdown = %d", code)
	}
	for _, lo := range []string{"127.0.0.1:5", "[::1]:5", "[::ffff:127.0.0.1]:5"} {
		if code, _ := do("POST", "/shutdown", lo); code != 200 {
			t.Errorf("/shutdown from %s = %d", lo, code)
		}
	}
	if shutdowns != 3 {
		t.Errorf("shutdowns = %d", shutdowns)
	}
}

// /endpoints is JSON for localhost only.
func TestEndpointsLoopbackOnly(t *testing.T) {
	h := Handler(Options{Gatherer: prometheus.NewRegistry(), Ready: func() error { return nil }, Shutdown: func() {},
		Endpoints: func() any { return []map[string]string{{"addr": "10.1.0.1:8080", "state": "ejected"}} }})
	do := func(remote string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("GET", "/endpoints", nil)
		r.RemoteAddr = remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := do("10.0.0.1:1"); w.Code != http.StatusForbidden || strings.Contains(w.Body.String(), "10.1.0.1") {
		t.Errorf("from the pod network: %d %q, want 403 and nothing of the state", w.Code, w.Body.String())
	}
	w := do("127.0.0.1:1")
	var got []map[string]string
	if err := json.Unmarshal(w.Body.Bytes(), &got); w.Code != 200 || err != nil || len(got) != 1 || got[0]["state"] != "ejected" {
		t.Errorf("from localhost: %d %q (%v), want the JSON state", w.Code, w.Body.String(), err)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type = %q", ct)
	}
}
