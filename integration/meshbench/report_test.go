package meshbench

import (
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/integration/loadgen"
)

// TestMarkdownBaseline checks the lines a plexus-before build adds, and
// that a run without one prints none of them.
func TestMarkdownBaseline(t *testing.T) {
	row := func(path string, p50, perRequest time.Duration) RateResult {
		return RateResult{Path: path, Rate: 500, Latency: loadgen.Summary{P50: p50}, CPUPerRequest: perRequest}
	}
	r := &Report{
		Rates:  []RateResult{row("direct", time.Millisecond, 0), row("plexus", 1100*time.Microsecond, 40*time.Microsecond), row("nginx", time.Millisecond, 0)},
		Memory: []MemoryRow{{When: "idle", Plexus: make([]Usage, 2), Peer: make([]Usage, 2)}},
	}
	var out strings.Builder
	r.Markdown(&out)
	if strings.Contains(out.String(), "plexus-before") {
		t.Errorf("a run without a baseline mentions one:\n%s", out.String())
	}

	r.Rates = append(r.Rates, row("plexus-before", 1000*time.Microsecond, 50*time.Microsecond))
	r.Memory[0].Before = make([]Usage, 2)
	out.Reset()
	r.Markdown(&out)
	for _, want := range []string{
		"- 500 req/s: plexus / plexus-before: p50 1.10x, CPU/request 0.80x (40.0 / 50.0 µs)\n",
		"| 500 | plexus-before | 1.000 |",
		"| plexus-before client | plexus-before server |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("missing %q in:\n%s", want, out.String())
		}
	}
}
