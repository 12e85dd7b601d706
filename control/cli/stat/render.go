package stat

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"
)

// Formats of Render.
const (
	FormatTable = ""
	FormatWide  = "wide"
	FormatJSON  = "json"
	FormatYAML  = "yaml"
)

// Render writes rows as a table (wide adds the namespace, the request
// count and scrape errors) or as JSON or YAML.
func Render(w io.Writer, rows []Row, format string) error {
	return render(w, rows, format, false)
}

// RenderOutbound is Render for outbound rows (Config.Outbound): the table
// has a CLUSTER column after NAME, each row's ToCluster or "local".
func RenderOutbound(w io.Writer, rows []Row, format string) error {
	return render(w, rows, format, true)
}

func render(w io.Writer, rows []Row, format string, outbound bool) error {
	if rows == nil {
		rows = []Row{}
	}
	if done, err := Encode(w, rows, format); done || err != nil {
		return err
	}
	wide := format == FormatWide
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	head := []string{"NAME", "MESHED", "SUCCESS", "RPS", "LATENCY_P50", "LATENCY_P95", "LATENCY_P99", "TLS"}
	if outbound {
		head = slices.Insert(head, 1, "CLUSTER")
	}
	if wide {
		head = append([]string{"NAMESPACE"}, append(head, "REQUESTS", "ERRORS")...)
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, r := range rows {
		cells := []string{
			r.Name,
			fmt.Sprintf("%d/%d", r.Meshed, r.Total),
			Percent(r.SuccessRate, 2),
			Number(r.RPS, 1, "rps"),
			Number(r.LatencyP50, 0, "ms"),
			Number(r.LatencyP95, 0, "ms"),
			Number(r.LatencyP99, 0, "ms"),
			Percent(r.TLSShare, 0),
		}
		if outbound {
			cells = slices.Insert(cells, 1, cmp.Or(r.ToCluster, "local"))
		}
		if wide {
			ns := r.Namespace
			if ns == "" {
				ns = "-"
			}
			errs := "-"
			if len(r.Errors) > 0 {
				errs = strings.Join(r.Errors, "; ")
			}
			cells = append([]string{ns}, append(cells, strconv.FormatFloat(r.Requests, 'f', -1, 64), errs)...)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}

// Encode writes v as JSON or YAML when format is one of them, and says
// whether it did; for FormatTable and FormatWide it writes nothing, and
// any other format is an error.
func Encode(w io.Writer, v any, format string) (bool, error) {
	switch format {
	case FormatJSON:
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, fmt.Errorf("encoding JSON: %w", err)
		}
		_, err = fmt.Fprintf(w, "%s\n", b)
		return true, err
	case FormatYAML:
		b, err := yaml.Marshal(v)
		if err != nil {
			return true, fmt.Errorf("encoding YAML: %w", err)
		}
		_, err = w.Write(b)
		return true, err
	case FormatTable, FormatWide:
		return false, nil
	}
	return false, fmt.Errorf("unknown output format %q: want json, yaml or wide", format)
}

// Percent prints a 0..1 share as a percentage with decimals, or "-".
func Percent(f *float64, decimals int) string {
	if f == nil {
		return "-"
	}
	return strconv.FormatFloat(*f*100, 'f', decimals, 64) + "%"
}

// Number prints f with decimals and unit, or more decimals where that
// would show 0 for a small non-zero value (a 0.4 ms latency reads 0.4ms,
// not 0ms), or "-".
func Number(f *float64, decimals int, unit string) string {
	if f == nil {
		return "-"
	}
	v := *f
	for decimals < 3 && v != 0 && math.Abs(v) < math.Pow(10, -float64(decimals)) {
		decimals++
	}
	return strconv.FormatFloat(v, 'f', decimals, 64) + unit
}
