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
