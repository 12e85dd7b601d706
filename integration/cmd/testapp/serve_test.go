package main

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestFailAndReceived(t *testing.T) {
	srv := httptest.NewServer(newBackend("h").mux())
	defer srv.Close()
	get := func(path string) int {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, step := range []struct {
		path string
		want int
	}{
		{"/a", 200},
		{"/testapp/fail?status=500", 200},
		{"/b?fail=0", 500},
		{"/testapp/fail?status=abc", 400},
		{"/testapp/fail?status=42", 400},
		{"/c", 500},
		{"/testapp/fail?status=0", 200},
		{"/d", 200},
	} {
		if got := get(step.path); got != step.want {
			t.Errorf("GET %s: %d, want %d", step.path, got, step.want)
		}
	}

	resp, err := http.Get(srv.URL + "/testapp/received")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got struct {
		Host     string
		Dropped  int64
		Received []received
	}
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	want := []received{{Path: "/a", Status: 200}, {Path: "/b", Status: 500}, {Path: "/c", Status: 500}, {Path: "/d", Status: 200}}
	if got.Host != "h" || got.Dropped != 0 || len(got.Received) != len(want) {
		t.Fatalf("received %+v, want host h and %+v", got, want)
	}
	for i, r := range got.Received {
		if r.Path != want[i].Path || r.Status != want[i].Status || r.UnixNano == 0 {
			t.Errorf("received[%d] = %+v, want %+v with its time", i, r, want[i])
		}
		if i > 0 && r.UnixNano < got.Received[i-1].UnixNano {
			t.Errorf("received[%d] arrived before received[%d]", i, i-1)
		}
	}
}

func TestDelayAtRunTime(t *testing.T) {
	b := newBackend("h")
	b.delay = time.Hour // -delay 1h
	srv := httptest.NewServer(b.mux())
	defer srv.Close()
	client := &http.Client{Timeout: 5 * time.Second} // a request that waits out -delay fails
	get := func(path string) (int, time.Duration) {
		t.Helper()
		start := time.Now()
		resp, err := client.Get(srv.URL + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, time.Since(start)
	}
	const slow = 30 * time.Millisecond
	for _, step := range []struct {
		path    string
		want    int
		atLeast time.Duration
	}{
		{"/testapp/delay?ms=0", 200, 0}, // turns -delay off
		{"/a", 200, 0},
		{"/testapp/delay?ms=30", 200, 0},
		{"/b", 200, slow},
		{"/testapp/delay?ms=-1", 400, 0},
		{"/testapp/delay?ms=abc", 400, 0},
		{"/testapp/delay", 400, 0},
		{"/testapp/delay?ms=3600001", 400, 0},
		{"/c", 200, slow}, // a refused change leaves the delay as it was
		{"/testapp/delay?ms=0", 200, 0},
		{"/d", 200, 0},
	} {
		got, took := get(step.path)
		if got != step.want || took < step.atLeast {
			t.Errorf("GET %s: %d after %v, want %d after at least %v", step.path, got, took, step.want, step.atLeast)
		}
	}

	b.mu.Lock()
	s, received := b.stats, b.received
	b.mu.Unlock()
	// Only /b and /c waited; /testapp/delay is not a request.
	if s.Requests != 4 || s.Delayed != 2 || len(received) != 4 {
		t.Errorf("stats %+v and %d recorded, want 4 requests of which 2 delayed, and 4 recorded", s, len(received))
	}
}

func TestReceivedForgetsTheOlderHalf(t *testing.T) {
	b := newBackend("h")
	for range maxReceived + 1 {
		b.record(time.Now(), "/", 200)
	}
	if len(b.received) != maxReceived/2+1 || b.dropped != maxReceived/2 {
		t.Errorf("%d remembered, %d dropped; want %d and %d", len(b.received), b.dropped, maxReceived/2+1, maxReceived/2)
	}
}

func TestLoadTimelineNamesTheProxyError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Plexus-Proxy-Error", "no-endpoints")
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	c, err := parseLoad([]string{"-timeline", srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	send, _, closeFn, err := c.sender("run")
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	s := summarize([]sample{send(0, 0)}, 0, true)
	if x := s.Timeline[0]; x.Status != "503" || x.ProxyError != "no-endpoints" || s.Errors["plexus-proxy-error: no-endpoints"] != 1 {
		t.Errorf("sample %+v, errors %v; want 503 with proxy_error no-endpoints, counted under its reason", x, s.Errors)
	}
}
