package meshbench

import (
	"fmt"
	"io"
	"time"

	"github.com/plexus-mesh/plexus/integration/loadgen"
)

// Report is what one run measured.
type Report struct {
	Duration   time.Duration
	Rates      []RateResult
	Throughput []Throughput
	Memory     []MemoryRow
	Notes      []string // paragraphs printed before the tables
}

// RateResult is one path at one fixed rate.
type RateResult struct {
	Path       string
	Rate       int
	Latency    loadgen.Summary
	Errors     int
	FirstErr   error
	SidecarCPU float64 // CPU seconds per second of the path's two sidecars
	// CPUPerRequest is the two sidecars' CPU time per request sent.
	CPUPerRequest time.Duration
}

// Throughput is one path at saturation.
type Throughput struct {
	Path   string
	RPS    float64
	Errors int
}

// MemoryRow is the sidecars' memory at one point of the run, client side
// first. Before is the plexus-before pair's, if the run had one.
type MemoryRow struct {
	When                 string
	Plexus, Before, Peer []Usage
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func mb(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

// added is a path's latency over the direct path's: "+0.123 ms (1.45x)".
func added(got, direct time.Duration) string {
	if direct <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%+.3f ms (%.2fx)", float64(got-direct)/float64(time.Millisecond), float64(got)/float64(direct))
}

// ratio is a over b: "1.02x".
func ratio(a, b float64) string {
	if b <= 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.2fx", a/b)
}

func us(d time.Duration) string { return fmt.Sprintf("%.1f", float64(d)/float64(time.Microsecond)) }

// Markdown writes the report as Markdown tables.
func (r *Report) Markdown(w io.Writer) {
	for _, n := range r.Notes {
		fmt.Fprintf(w, "%s\n\n", n)
	}
	fmt.Fprintf(w, "### Latency at fixed rates (HTTP/1.1 keep-alive, %s per cell, open loop)\n\n", r.Duration)
	fmt.Fprintln(w, "| rate | path | p50 ms | p90 ms | p99 ms | max ms | errors | sidecar CPU | p50 over direct | p99 over direct |")
	fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	direct := map[int]loadgen.Summary{}
	for _, res := range r.Rates {
		if res.Path == "direct" {
			direct[res.Rate] = res.Latency
		}
	}
	for _, res := range r.Rates {
		d := direct[res.Rate]
		over50, over99 := "—", "—"
		if res.Path != "direct" {
			over50, over99 = added(res.Latency.P50, d.P50), added(res.Latency.P99, d.P99)
		}
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %d | %.0f%% | %s | %s |\n", res.Rate, res.Path,
			ms(res.Latency.P50), ms(res.Latency.P90), ms(res.Latency.P99), ms(res.Latency.Max),
			res.Errors, res.SidecarCPU*100, over50, over99)
	}
	r.compareBuilds(w)
	for _, res := range r.Rates {
		if res.Errors > 0 {
			fmt.Fprintf(w, "\n%s at %d req/s: %d errors, the first: %v\n", res.Path, res.Rate, res.Errors, res.FirstErr)
		}
	}
	fmt.Fprintln(w, "\n### Maximum throughput (closed loop)")
	fmt.Fprintln(w, "\n| path | req/s | vs direct | errors |\n|---|---:|---:|---:|")
	var directRPS float64
	for _, t := range r.Throughput {
		if t.Path == "direct" {
			directRPS = t.RPS
		}
	}
	for _, t := range r.Throughput {
		fmt.Fprintf(w, "| %s | %.0f | %.2fx | %d |\n", t.Path, t.RPS, t.RPS/directRPS, t.Errors)
	}
	fmt.Fprintln(w, "\n### Sidecar memory (RSS / peak RSS in MB, client side + server side)")
	if len(r.Memory) > 0 && len(r.Memory[0].Before) > 0 {
		fmt.Fprintln(w, "\n| when | plexus client | plexus server | plexus-before client | plexus-before server | nginx client | nginx server |\n|---|---:|---:|---:|---:|---:|---:|")
	} else {
		fmt.Fprintln(w, "\n| when | plexus client | plexus server | nginx client | nginx server |\n|---|---:|---:|---:|---:|")
	}
	for _, m := range r.Memory {
		fmt.Fprintf(w, "| %s |", m.When)
		for _, u := range append(append(append([]Usage{}, m.Plexus...), m.Before...), m.Peer...) {
			fmt.Fprintf(w, " %s / %s |", mb(u.RSS), mb(u.PeakRSS))
		}
		fmt.Fprintln(w)
	}
}

// compareBuilds writes, at each rate measured with a plexus-before build,
// the plexus build's p50 and CPU per request over plexus-before's.
func (r *Report) compareBuilds(w io.Writer) {
	before := map[int]RateResult{}
	for _, res := range r.Rates {
		if res.Path == "plexus-before" {
			before[res.Rate] = res
		}
	}
	if len(before) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, res := range r.Rates {
		if b, ok := before[res.Rate]; ok && res.Path == "plexus" {
			fmt.Fprintf(w, "- %d req/s: plexus / plexus-before: p50 %s, CPU/request %s (%s / %s µs)\n", res.Rate,
				ratio(float64(res.Latency.P50), float64(b.Latency.P50)),
				ratio(float64(res.CPUPerRequest), float64(b.CPUPerRequest)), us(res.CPUPerRequest), us(b.CPUPerRequest))
		}
	}
}
