package meshstats

import (
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"
)

func scrape(t *testing.T, name string) Counts {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	c, err := Parse(b)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

// want is a Stats with plain numbers; NaN stands for "no value" (nil).
type want struct {
	requests, success, rps, p50, p95, p99, tls float64
}

var none = math.NaN()

func check(t *testing.T, got Stats, w want) {
	t.Helper()
	if got.Requests != w.requests {
		t.Errorf("requests = %v, want %v", got.Requests, w.requests)
	}
	for _, f := range []struct {
		name string
		got  *float64
		want float64
	}{
		{"success rate", got.SuccessRate, w.success},
		{"rps", got.RPS, w.rps},
		{"p50", got.LatencyP50, w.p50},
		{"p95", got.LatencyP95, w.p95},
		{"p99", got.LatencyP99, w.p99},
		{"tls share", got.TLSShare, w.tls},
	} {
		switch {
		case math.IsNaN(f.want) && f.got != nil:
			t.Errorf("%s = %v, want none", f.name, *f.got)
		case !math.IsNaN(f.want) && f.got == nil:
			t.Errorf("%s = none, want %v", f.name, f.want)
		case f.got != nil && math.Abs(*f.got-f.want) > 1e-9:
			t.Errorf("%s = %v, want %v", f.name, *f.got, f.want)
		}
	}
}

func TestCompute(t *testing.T) {
	for _, tc := range []struct {
		name          string
		before, after string
		window        time.Duration
		want          want
	}{
		{
			// inbound deltas: 900 mTLS 200s, 10 mTLS 500s, 90 plaintext 200s;
			// outbound series are ignored. Cumulative latency deltas
			// 2ms:100 3ms:300 4ms:400 5ms:600 10ms:900 20ms:1000.
			name: "mTLS and plaintext traffic", before: "web-before.prom", after: "web-after.prom", window: 10 * time.Second,
			want: want{requests: 1000, success: 0.99, rps: 100, p50: 4.5, p95: 15, p99: 19, tls: 0.91},
		},
		{
			// counters went down: the proxy restarted, after is the delta.
			// 40 mTLS 200s in (50,100] ms, 10 plaintext 503s in (100,200].
			name: "proxy restarted between the scrapes", before: "web-before.prom", after: "restarted-after.prom", window: 5 * time.Second,
			want: want{requests: 50, success: 0.8, rps: 10, p50: 81.25, p95: 175, p99: 195, tls: 0.8},
		},
		{
			name: "every response slower than the last finite bucket", before: "slow-before.prom", after: "slow-after.prom", window: 2 * time.Second,
			want: want{requests: 4, success: 1, rps: 2, p50: 50000, p95: 50000, p99: 50000, tls: 1},
		},
		{
			name: "no traffic", before: "web-after.prom", after: "web-after.prom", window: 5 * time.Second,
			want: want{requests: 0, success: none, rps: none, p50: none, p95: none, p99: none, tls: none},
		},
		{
			name: "no HTTP metrics at all", before: "idle.prom", after: "idle.prom", window: 5 * time.Second,
			want: want{requests: 0, success: none, rps: none, p50: none, p95: none, p99: none, tls: none},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			check(t, Compute(Delta(scrape(t, tc.before), scrape(t, tc.after)), tc.window), tc.want)
		})
	}
}

// TestAggregate sums two pods' deltas, as a deployment row does.
func TestAggregate(t *testing.T) {
	web := Delta(scrape(t, "web-before.prom"), scrape(t, "web-after.prom"))
	restarted := Delta(scrape(t, "web-before.prom"), scrape(t, "restarted-after.prom"))
	sum := Add(web, restarted)
	// 1050 responses: 990+40 successes, 910+40 over mTLS. Cumulative
	// latency: 5ms:600 10ms:900 20ms:1000 100ms:1040 200ms:1050.
	check(t, Compute(sum, 10*time.Second), want{
		requests: 1050, success: 1030.0 / 1050, rps: 105, p50: 4 + (525.0-400)/200, p95: 10 + 10*(997.5-900)/100, p99: 50 + 50*(1039.5-1000)/40, tls: 950.0 / 1050,
	})
	if web.Total() != 1000 {
		t.Errorf("Add changed its argument: web total %v", web.Total())
	}
}

func TestQuantileEdges(t *testing.T) {
	if q := Quantile(0.5, map[float64]float64{1: 0}); q != nil {
		t.Errorf("no +Inf bucket: got %v, want none", *q)
	}
	if q := Quantile(0.5, map[float64]float64{1: 0, math.Inf(1): 0}); q != nil {
		t.Errorf("no observations: got %v, want none", *q)
	}
	// All in the first bucket: interpolated from 0.
	if q := Quantile(0.5, map[float64]float64{10: 4, math.Inf(1): 4}); q == nil || *q != 5 {
		t.Errorf("first bucket: got %v, want 5", q)
	}
}

func TestParseError(t *testing.T) {
	if _, err := Parse([]byte("response_total{direction=\"inbound\" 12\n")); err == nil {
		t.Error("Parse accepted broken text")
	}
}
