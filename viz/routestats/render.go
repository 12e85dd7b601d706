package routestats

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/plexus-mesh/plexus/control/cli/stat"
)

// Render writes rows as a table (wide: effective and actual RPS, retries
// and timeouts in the window) or as JSON or YAML (stat's formats).
func Render(w io.Writer, rows []Row, format string) error {
	if rows == nil {
		rows = []Row{}
	}
	if done, err := stat.Encode(w, rows, format); done || err != nil {
		return err
	}
	wide := format == stat.FormatWide
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	head := []string{"ROUTE", "SERVICE", "SUCCESS", "RPS", "LATENCY_P50", "LATENCY_P95", "LATENCY_P99"}
	if wide {
		head = []string{"ROUTE", "SERVICE", "SUCCESS", "EFFECTIVE_RPS", "ACTUAL_RPS", "LATENCY_P50", "LATENCY_P95", "LATENCY_P99", "RETRIES", "TIMEOUTS"}
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		rps := []string{stat.Number(r.RPS, 1, "rps")}
		if wide {
			rps = append(rps, stat.Number(r.ActualRPS, 1, "rps"))
		}
		cells := append([]string{RouteName(r.Route), ServiceName(r.Parent), stat.Percent(r.SuccessRate, 2)}, rps...)
		cells = append(cells, stat.Number(r.LatencyP50, 0, "ms"), stat.Number(r.LatencyP95, 0, "ms"), stat.Number(r.LatencyP99, 0, "ms"))
		if wide {
			cells = append(cells, count(r.Retries), count(r.Timeouts))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}

// RouteName is namespace/kind/name, leaving out empty parts (a default
// route has no namespace).
func RouteName(r Ref) string {
	var parts []string
	for _, p := range []string{r.Namespace, r.Kind, r.Name} {
		if p != "" {
			parts = append(parts, p)
		}
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "/")
}

// ServiceName is namespace/name:port of the parent.
func ServiceName(p Ref) string {
	s := p.Name
	if p.Namespace != "" {
		s = p.Namespace + "/" + s
	}
	if p.Port != "" {
		s += ":" + p.Port
	}
	if s == "" {
		return "-"
	}
	return s
}

func count(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
