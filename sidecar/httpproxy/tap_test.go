package httpproxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/tappb"
	"github.com/plexus-mesh/plexus/sidecar/tap"
)

// tapEvents collects a subscription's events of n requests.
func tapEvents(t *testing.T, sub *tap.Subscription, n int) []*tappb.TapEvent {
	t.Helper()
	var evs []*tappb.TapEvent
	timeout := time.After(5 * time.Second)
	for ends := 0; ends < n; {
		select {
		case ev := <-sub.Events():
			evs = append(evs, ev)
			if ev.GetResponseEnd() != nil {
				ends++
			}
		case <-timeout:
			t.Fatalf("%d of %d requests ended in the tap: %v", ends, n, evs)
		}
	}
	return evs
}

// TestTapSeesBothEngines: a tap session sees each request's start with
// its headers (credentials redacted), its response status and its end
// with the body's length, on the fast path and on net/http.
func TestTapSeesBothEngines(t *testing.T) {
	body := strings.Repeat("b", 1234)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
		if r.URL.Query().Get("chunked") != "" {
			w.(http.Flusher).Flush() // no length: chunked
		}
		io.WriteString(w, body)
	}))
	defer up.Close()
	dst := netip.MustParseAddrPort(up.Listener.Addr().String())
	hub := tap.NewHub(nil)
	sub, err := hub.Subscribe(&tappb.ObserveRequest{MaxRps: 1000})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	f := startFast(t, dst, func(o *Options) { o.Tap = hub })

	// The fast path: Content-Length, then chunked.
	c, r := f.dial(t)
	for _, q := range []string{"", "?chunked=1"} {
		if _, err := io.WriteString(c, "GET /fast"+q+" HTTP/1.1\r\nHost: svc\r\nAuthorization: Bearer x\r\nX-Trace: 7\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		res, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
	}
	// net/http, HTTP/1.1 and HTTP/2 alike.
	srv := httptest.NewUnstartedServer(f.p)
	srv.Config.ConnContext = func(ctx context.Context, _ net.Conn) context.Context { return WithDestination(ctx, dst) }
	srv.Start()
	defer srv.Close()
	res, err := http.Get(srv.URL + "/nethttp")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()

	evs := tapEvents(t, sub, 3)
	type seen struct {
		path    string
		status  uint32
		bytes   int64
		headers map[string]string
	}
	byID := map[uint64]*seen{}
	for _, ev := range evs {
		s := byID[ev.Id]
		if s == nil {
			s = &seen{headers: map[string]string{}}
			byID[ev.Id] = s
		}
		switch {
		case ev.GetRequestStart() != nil:
			s.path = ev.GetRequestStart().Path
			for _, h := range ev.GetRequestStart().Headers {
				s.headers[h.Name] = h.Value
			}
		case ev.GetResponseStart() != nil:
			s.status = ev.GetResponseStart().Status
		case ev.GetResponseEnd() != nil:
			s.bytes = ev.GetResponseEnd().ResponseBytes
		}
	}
	paths := map[string]bool{}
	for _, s := range byID {
		paths[s.path] = true
		if s.status != 201 || s.bytes != int64(len(body)) {
			t.Errorf("%s: status %d, %d body bytes; want 201, %d", s.path, s.status, s.bytes, len(body))
		}
		if strings.HasPrefix(s.path, "/fast") && (s.headers["authorization"] != tap.Redacted || s.headers["x-trace"] != "7") {
			t.Errorf("%s: headers %v, want authorization redacted and x-trace", s.path, s.headers)
		}
	}
	for _, p := range []string{"/fast", "/fast?chunked=1", "/nethttp"} {
		if !paths[p] {
			t.Errorf("no tap events for %s: %v", p, paths)
		}
	}
}
