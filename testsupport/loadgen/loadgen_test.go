package loadgen

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	var s []time.Duration
	for i := 1; i <= 100; i++ {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{{50, 50 * time.Millisecond}, {90, 90 * time.Millisecond}, {99, 99 * time.Millisecond}, {100, 100 * time.Millisecond}, {0, time.Millisecond}} {
		if got := Percentile(s, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	sum := Summarize([]time.Duration{3, 1, 2})
	if sum.P50 != 2 || sum.Max != 3 || sum.Count != 3 {
		t.Errorf("Summarize = %+v", sum)
	}
}

func TestRunKeepsTheRate(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	res, err := Run(context.Background(), Config{URL: srv.URL, Rate: 200, Duration: time.Second, Workers: 4, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Latencies) != 200 || res.Errors != 0 || hits.Load() != 200 {
		t.Fatalf("want 200 requests and no errors, got %d ok, %d errors (%v), %d hits", len(res.Latencies), res.Errors, res.FirstErr, hits.Load())
	}
	if res.Elapsed < 990*time.Millisecond || res.Elapsed > 3*time.Second {
		t.Errorf("200 requests at 200/s took %s", res.Elapsed)
	}
}

// A server that stalls must show up as latency of the requests that were
// due meanwhile (no coordinated omission).
func TestRunMeasuresFromDueTime(t *testing.T) {
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) == 1 {
			time.Sleep(300 * time.Millisecond) // Sleep: the server stalls on purpose
		}
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Config{URL: srv.URL, Rate: 100, Duration: 500 * time.Millisecond, Workers: 1, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	s := Summarize(res.Latencies)
	// With one worker, the ~30 requests due during the stall queue behind it.
	if s.P90 < 100*time.Millisecond {
		t.Errorf("p90 %s: stalled requests were not counted from their due time", s.P90)
	}
}

func TestErrorsAreCounted(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusBadGateway)
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Config{URL: srv.URL, Rate: 50, Duration: 200 * time.Millisecond, Workers: 2, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 10 || len(res.Latencies) != 0 || res.FirstErr == nil {
		t.Errorf("want 10 errors, got %d (ok %d, first %v)", res.Errors, len(res.Latencies), res.FirstErr)
	}
}

func TestSaturate(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	rps, res, err := Saturate(context.Background(), Config{URL: srv.URL, Duration: 300 * time.Millisecond, Workers: 4, Client: srv.Client()})
	if err != nil {
		t.Fatal(err)
	}
	if rps < 100 || res.Errors != 0 {
		t.Errorf("saturate: %.0f req/s, %d errors (%v)", rps, res.Errors, res.FirstErr)
	}
}

func TestValidate(t *testing.T) {
	good := Config{URL: "http://x", Rate: 1, Duration: time.Second, Workers: 1, Client: http.DefaultClient}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []func(*Config){
		func(c *Config) { c.URL = "" }, func(c *Config) { c.Rate = 0 },
		func(c *Config) { c.Duration = 0 }, func(c *Config) { c.Workers = 0 }, func(c *Config) { c.Client = nil },
	} {
		c := good
		bad(&c)
		if c.Validate() == nil {
			t.Errorf("Validate accepted %+v", c)
		}
	}
}
