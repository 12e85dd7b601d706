package meshbench

import (
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/testsupport/loadgen"
)

func row(path string, p50, p99, perRequest time.Duration) RateResult {
	return RateResult{Path: path, Proto: protoHTTP1, Rate: 500, Latency: loadgen.Summary{P50: p50, P99: p99}, CPUPerRequest: perRequest}
}

// TestMarkdownBaseline checks the lines a -before build adds, and that a
// run without one prints none of them.
func TestMarkdownBaseline(t *testing.T) {
	ms := time.Millisecond
	r := &Report{
		Rates:  []RateResult{row("direct", ms, 2*ms, 0), row("plexus", 1100*time.Microsecond, 3*ms, 40*time.Microsecond), row("nginx", ms, 2*ms, 0)},
		Memory: []MemoryRow{{When: "idle", Pairs: []PairUsage{{"plexus", make([]Usage, 2)}, {"nginx", make([]Usage, 2)}}}},
	}
	var out strings.Builder
	r.Markdown(&out)
	if strings.Contains(out.String(), "-before") {
		t.Errorf("a run without a baseline mentions one:\n%s", out.String())
	}

	r.Rates = append(r.Rates, row("plexus-before", 1000*time.Microsecond, 3*ms, 50*time.Microsecond))
	r.Memory[0].Pairs = append(r.Memory[0].Pairs, PairUsage{"plexus-before", make([]Usage, 2)})
	out.Reset()
	r.Markdown(&out)
	for _, want := range []string{
		"- HTTP/1.1 500 req/s: plexus / plexus-before: p50 1.10x, CPU/request 0.80x (40.0 / 50.0 µs)\n",
		"| 500 | plexus-before | 1.000 |",
		"| plexus-before client | plexus-before server |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
}

// TestMarkdownTargets checks the target lines: met and missed, and the
// ratios against each peer mTLS pair.
func TestMarkdownTargets(t *testing.T) {
	us := time.Microsecond
	r := &Report{Rates: []RateResult{
		row("direct", 500*us, 1000*us, 0),
		row("plexus-mtls", 750*us, 1500*us, 60*us),
		row("nginx-mtls", 1000*us, 3000*us, 120*us),
		row("haproxy-mtls", 500*us, 1500*us, 30*us),
	}}
	var out strings.Builder
	r.Markdown(&out)
	want := "- HTTP/1.1 500 req/s: plexus-mtls adds p50 +0.250 ms (target ≤ +0.300 ms, met), p99 +0.500 ms (target ≤ +1.000 ms, met); " +
		"vs nginx-mtls p50 0.75x, p99 0.50x, CPU/request 0.50x; vs haproxy-mtls p50 1.50x, p99 1.00x, CPU/request 2.00x\n"
	if !strings.Contains(out.String(), want) {
		t.Errorf("missing %q in:\n%s", want, out.String())
	}
	r.Rates[1].Latency.P50 = 900 * us
	out.Reset()
	r.Markdown(&out)
	if !strings.Contains(out.String(), "p50 +0.400 ms (target ≤ +0.300 ms, MISSED)") {
		t.Errorf("a missed p50 target is not reported:\n%s", out.String())
	}
}

// TestMarkdownH2Targets checks the HTTP/2 target lines: CPU per request
// against the HTTP/1.1 pair's, the ratios against the peers' HTTP/2 pairs,
// and maximum throughput over direct.
func TestMarkdownH2Targets(t *testing.T) {
	us := time.Microsecond
	h2 := func(path string, p50, p99, perRequest time.Duration) RateResult {
		r := row(path, p50, p99, perRequest)
		r.Proto = "gRPC unary"
		return r
	}
	r := &Report{
		Rates: []RateResult{
			row("direct", 500*us, 1000*us, 0),
			row("plexus-mtls", 750*us, 1500*us, 100*us),
			h2("direct", 500*us, 1000*us, 0),
			h2("plexus-mtls", 700*us, 2200*us, 140*us),
			h2("nginx-h2-mtls", 1400*us, 2200*us, 280*us),
			h2("haproxy-h2-mtls", 700*us, 1100*us, 70*us),
		},
		Throughput: []Throughput{
			{Path: "direct", Proto: "gRPC unary", RPS: 10000},
			{Path: "plexus-mtls", Proto: "gRPC unary", RPS: 3500},
			{Path: "nginx-h2-mtls", Proto: "gRPC unary", RPS: 2000},
		},
	}
	var out strings.Builder
	r.Markdown(&out)
	for _, want := range []string{
		"- gRPC unary 500 req/s: plexus-mtls adds p50 +0.200 ms (target ≤ +0.300 ms, met), p99 +1.200 ms (target ≤ +1.000 ms, MISSED), " +
			"CPU/request 1.40x HTTP/1.1's (target ≤ 1.30x, MISSED); " +
			"vs nginx-h2-mtls p50 0.50x, p99 1.00x, CPU/request 0.50x; vs haproxy-h2-mtls p50 1.00x, p99 2.00x, CPU/request 2.00x\n",
		"- gRPC unary maximum throughput: plexus-mtls 0.35x direct (target ≥ 0.40x, MISSED); nginx-h2-mtls 0.20x\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
}
