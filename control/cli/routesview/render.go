package routesview

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/control/routestats"
)

// Render writes rows as a table (wide: effective and actual RPS, retries
// and timeouts in the window) or as JSON or YAML (stat's formats).
func Render(w io.Writer, rows []routestats.Row, format string) error {
	if rows == nil {
		rows = []routestats.Row{}
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
		cells := append([]string{routestats.RouteName(r.Route), routestats.ServiceName(r.Parent), stat.Percent(r.SuccessRate, 2)}, rps...)
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

func count(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
