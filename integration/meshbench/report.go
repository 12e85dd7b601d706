package meshbench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/plexus-mesh/plexus/testsupport/loadgen"
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
	Proto      string // "HTTP/1.1", "h2c", "gRPC unary", "gRPC streaming"
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
	Path     string
	Proto    string
	RPS      float64
	Errors   int
	FirstErr error
}

// MemoryRow is every pair's memory at one point of the run.
type MemoryRow struct {
	When  string
	Pairs []PairUsage
}

// PairUsage is one pair's sidecars' usage, client side first.
type PairUsage struct {
	Name  string
	Sides []Usage
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f", float64(d)/float64(time.Millisecond)) }

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

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

// Markdown writes the report as Markdown tables: latency per protocol,
// the targets, throughput and memory.
func (r *Report) Markdown(w io.Writer) {
	for _, n := range r.Notes {
		fmt.Fprintf(w, "%s\n\n", n)
	}
	direct := map[[2]any]loadgen.Summary{}
	var protos []string
	for _, res := range r.Rates {
		if !slices.Contains(protos, res.Proto) {
			protos = append(protos, res.Proto)
		}
		if res.Path == "direct" {
			direct[[2]any{res.Proto, res.Rate}] = res.Latency
		}
	}
	for _, proto := range protos {
		fmt.Fprintf(w, "### %s: latency at fixed rates (%s per cell, open loop)\n\n", proto, r.Duration)
		fmt.Fprintln(w, "| rate | path | p50 ms | p90 ms | p99 ms | max ms | errors | sidecar CPU | CPU/request µs | p50 over direct | p99 over direct |")
		fmt.Fprintln(w, "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
		for _, res := range r.Rates {
			if res.Proto != proto {
				continue
			}
			d := direct[[2]any{res.Proto, res.Rate}]
			over50, over99, perReq := "—", "—", "—"
			if res.Path != "direct" {
				over50, over99, perReq = added(res.Latency.P50, d.P50), added(res.Latency.P99, d.P99), us(res.CPUPerRequest)
			}
			fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %d | %.0f%% | %s | %s | %s |\n", res.Rate, res.Path,
				ms(res.Latency.P50), ms(res.Latency.P90), ms(res.Latency.P99), ms(res.Latency.Max),
				res.Errors, res.SidecarCPU*100, perReq, over50, over99)
		}
		fmt.Fprintln(w)
	}
	r.targets(w)
	r.compareBuilds(w)
	for _, res := range r.Rates {
		if res.Errors > 0 {
			fmt.Fprintf(w, "\n%s %s at %d req/s: %d errors, the first: %v\n", res.Path, res.Proto, res.Rate, res.Errors, res.FirstErr)
		}
	}
	fmt.Fprintln(w, "\n### Maximum throughput (closed loop)")
	fmt.Fprintln(w, "\n| protocol | path | req/s | vs direct | errors |\n|---|---|---:|---:|---:|")
	directRPS := map[string]float64{}
	for _, t := range r.Throughput {
		if t.Path == "direct" {
			directRPS[t.Proto] = t.RPS
		}
	}
	for _, t := range r.Throughput {
		fmt.Fprintf(w, "| %s | %s | %.0f | %s | %d |\n", t.Proto, t.Path, t.RPS, ratio(t.RPS, directRPS[t.Proto]), t.Errors)
	}
	for _, t := range r.Throughput {
		if t.Errors > 0 {
			fmt.Fprintf(w, "\n%s %s at saturation: %d errors, the first: %v\n", t.Path, t.Proto, t.Errors, t.FirstErr)
		}
	}
	fmt.Fprintln(w, "\n### Sidecar memory (PSS / RSS / peak RSS in MiB, client side + server side)")
	fmt.Fprintln(w, "\nThe plexus-mtls pair carries the HTTP/1.1, h2c and gRPC cells of each rate; the nginx-h2-mtls and haproxy-h2-mtls pairs the h2c and gRPC ones; the other pairs HTTP/1.1 only.")
	if len(r.Memory) == 0 {
		return
	}
	fmt.Fprint(w, "\n| when |")
	for _, p := range r.Memory[0].Pairs {
		fmt.Fprintf(w, " %s client | %s server |", p.Name, p.Name)
	}
	fmt.Fprint(w, "\n|---|")
	for range r.Memory[0].Pairs {
		fmt.Fprint(w, "---:|---:|")
	}
	fmt.Fprintln(w)
	for _, m := range r.Memory {
		fmt.Fprintf(w, "| %s |", m.When)
		for _, p := range m.Pairs {
			for i := range 2 {
				cell := "—"
				if i < len(p.Sides) {
					cell = mib(p.Sides[i].PSS) + " / " + mib(p.Sides[i].RSS) + " / " + mib(p.Sides[i].PeakRSS)
				}
				fmt.Fprintf(w, " %s |", cell)
			}
		}
		fmt.Fprintln(w)
	}
}

// protoHTTP1 names the HTTP/1.1 protocol in results.
const protoHTTP1 = "HTTP/1.1"

// ARCHITECTURE.md §6 targets for the mTLS pair, HTTP/1.1 and HTTP/2 alike
// (issue 28 holds HTTP/2 to HTTP/1.1's latency targets).
const (
	targetAddedP50 = 300 * time.Microsecond
	targetAddedP99 = time.Millisecond
	// targetH2CPU bounds an HTTP/2 request's pair CPU over an HTTP/1.1
	// request's at the same rate.
	targetH2CPU = 1.3
	// targetH2Throughput is the least maximum throughput over direct.
	targetH2Throughput = 0.40
)

// peerPairs are the peer mTLS pairs the plexus mTLS pair is compared
// with in each protocol.
func peerPairs(proto string) []string {
	if proto == protoHTTP1 {
		return []string{"nginx-mtls", "haproxy-mtls"}
	}
	return []string{"nginx-h2-mtls", "haproxy-h2-mtls"}
}

// targets writes, for each protocol and rate, whether the plexus mTLS pair
// met the targets: added p50 and p99 over direct; for HTTP/2, CPU per
// request against HTTP/1.1's and maximum throughput; and its ratios to
// each peer mTLS pair on p50, p99 and CPU per request.
func (r *Report) targets(w io.Writer) {
	at := map[[3]any]RateResult{}
	var protos []string
	var rates []int
	for _, res := range r.Rates {
		at[[3]any{res.Path, res.Proto, res.Rate}] = res
		if !slices.Contains(protos, res.Proto) {
			protos = append(protos, res.Proto)
		}
		if !slices.Contains(rates, res.Rate) {
			rates = append(rates, res.Rate)
		}
	}
	var lines []string
	for _, proto := range protos {
		for _, rate := range rates {
			m, ok := at[[3]any{"plexus-mtls", proto, rate}]
			d, okd := at[[3]any{"direct", proto, rate}]
			if !ok || !okd {
				continue
			}
			p50, p99 := m.Latency.P50-d.Latency.P50, m.Latency.P99-d.Latency.P99
			line := fmt.Sprintf("- %s %d req/s: plexus-mtls adds p50 %s (target ≤ %s, %s), p99 %s (target ≤ %s, %s)", proto, rate,
				msDelta(p50), msDelta(targetAddedP50), met(p50 <= targetAddedP50), msDelta(p99), msDelta(targetAddedP99), met(p99 <= targetAddedP99))
			if h1, ok := at[[3]any{"plexus-mtls", protoHTTP1, rate}]; ok && proto != protoHTTP1 && h1.CPUPerRequest > 0 {
				x := float64(m.CPUPerRequest) / float64(h1.CPUPerRequest)
				line += fmt.Sprintf(", CPU/request %.2fx HTTP/1.1's (target ≤ %.2fx, %s)", x, targetH2CPU, met(x <= targetH2CPU))
			}
			for _, peer := range peerPairs(proto) {
				q, ok := at[[3]any{peer, proto, rate}]
				if !ok {
					continue
				}
				line += fmt.Sprintf("; vs %s p50 %s, p99 %s, CPU/request %s", peer,
					ratio(float64(m.Latency.P50), float64(q.Latency.P50)), ratio(float64(m.Latency.P99), float64(q.Latency.P99)),
					ratio(float64(m.CPUPerRequest), float64(q.CPUPerRequest)))
			}
			lines = append(lines, line)
		}
	}
	lines = append(lines, r.throughputTargets()...)
	if len(lines) == 0 {
		return
	}
	fmt.Fprintln(w, "### Targets (ARCHITECTURE.md §6 and issue 28, mTLS; ratios under 1.00x are ahead of the peer)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

// throughputTargets says, for each HTTP/2 protocol, whether the plexus
// mTLS pair's maximum throughput reached the target share of direct's.
func (r *Report) throughputTargets() []string {
	rps := map[[2]string]float64{}
	for _, t := range r.Throughput {
		rps[[2]string{t.Path, t.Proto}] = t.RPS
	}
	var lines []string
	for _, t := range r.Throughput {
		d := rps[[2]string{"direct", t.Proto}]
		if t.Path != "plexus-mtls" || t.Proto == protoHTTP1 || d <= 0 {
			continue
		}
		x := t.RPS / d
		line := fmt.Sprintf("- %s maximum throughput: plexus-mtls %.2fx direct (target ≥ %.2fx, %s)", t.Proto, x, targetH2Throughput, met(x >= targetH2Throughput))
		for _, peer := range peerPairs(t.Proto) {
			if q := rps[[2]string{peer, t.Proto}]; q > 0 {
				line += fmt.Sprintf("; %s %.2fx", peer, q/d)
			}
		}
		lines = append(lines, line)
	}
	return lines
}

func msDelta(d time.Duration) string {
	return fmt.Sprintf("%+.3f ms", float64(d)/float64(time.Millisecond))
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// compareBuilds writes, at each rate and protocol measured with a -before
// build, this build's p50 and CPU per request over the other's.
func (r *Report) compareBuilds(w io.Writer) {
	before := map[[3]any]RateResult{}
	for _, res := range r.Rates {
		if name, ok := strings.CutSuffix(res.Path, "-before"); ok {
			before[[3]any{name, res.Proto, res.Rate}] = res
		}
	}
	if len(before) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, res := range r.Rates {
		if b, ok := before[[3]any{res.Path, res.Proto, res.Rate}]; ok {
			fmt.Fprintf(w, "- %s %d req/s: %s / %s-before: p50 %s, CPU/request %s (%s / %s µs)\n", res.Proto, res.Rate, res.Path, res.Path,
				ratio(float64(res.Latency.P50), float64(b.Latency.P50)),
				ratio(float64(res.CPUPerRequest), float64(b.CPUPerRequest)), us(res.CPUPerRequest), us(b.CPUPerRequest))
		}
	}
}
