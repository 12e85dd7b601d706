package diagnostics

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/plexus-mesh/plexus/control/cli/stat"
)

// RenderEndpoints writes r as a table (wide adds the node, opaque and
// the slice) or as JSON or YAML.
func RenderEndpoints(w io.Writer, r *EndpointsReport, format string) error {
	if done, err := stat.Encode(w, r, format); done || err != nil {
		return err
	}
	published := 0
	for _, e := range r.Endpoints {
		if e.Published {
			published++
		}
	}
	opaque := ""
	if r.Opaque {
		opaque = ", opaque"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s%s: %d endpoints published of %d listed (trust domain %s)\n", r.Authority, opaque, published, len(r.Endpoints), r.TrustDomain)
	if len(r.Endpoints) == 0 {
		_, err := io.WriteString(w, b.String())
		return err
	}
	wide := format == stat.FormatWide
	tw := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
	head := []string{"ADDRESS", "PUBLISHED", "READY", "SERVING", "TERMINATING", "POD", "IDENTITY", "ZONE"}
	if wide {
		head = append(head, "NODE", "OPAQUE", "SLICE")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, e := range r.Endpoints {
		pub := yesNo(e.Published)
		switch {
		case e.Published && !e.Ready:
			pub = "terminating"
		case e.Note != "":
			pub = "no (" + e.Note + ")"
		}
		id := e.Identity
		if id == "" && e.Pod != "" && e.Note == "" {
			id = "(not meshed)"
		}
		cells := []string{e.Address, pub, yesNo(e.Ready), yesNo(e.Serving), yesNo(e.Terminating), dash(e.Pod), dash(id), dash(e.Zone)}
		if wide {
			cells = append(cells, dash(e.Node), yesNo(e.Opaque), e.Slice)
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
