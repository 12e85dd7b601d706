package diagnostics

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/plexus-mesh/plexus/control/cli/stat"
)

// RenderEndpoints writes r as a table (wide adds the owner) or as JSON
// or YAML; with a comparison, the EndpointSlices' table follows.
func RenderEndpoints(w io.Writer, r *EndpointsReport, format string) error {
	if done, err := stat.Encode(w, r, format); done || err != nil {
		return err
	}
	var b strings.Builder
	asked := fmt.Sprintf("(pod %s, trust domain %s)", r.Destination, r.TrustDomain)
	switch {
	case !r.Exists:
		fmt.Fprintf(&b, "%s: 0 endpoints published by destination %s: it does not know the service (it does not exist, or is of type ExternalName, which proxies resolve by DNS)\n", r.Authority, asked)
	default:
		fmt.Fprintf(&b, "%s: %d endpoints published by destination %s\n", r.Authority, len(r.Endpoints), asked)
	}
	wide := format == stat.FormatWide
	if len(r.Endpoints) > 0 {
		tw := tabwriter.NewWriter(&b, 0, 8, 3, ' ', 0)
		head := []string{"ADDRESS", "IDENTITY", "WEIGHT", "PROTOCOL", "ZONE", "POD", "TERMINATING"}
		if wide {
			head = append(head, "OWNER")
		}
		fmt.Fprintln(tw, strings.Join(head, "\t"))
		for _, e := range r.Endpoints {
			id := e.Identity
			if id == "" {
				id = "none (plaintext)"
			}
			cells := []string{e.Address, id, strconv.FormatUint(uint64(e.Weight), 10), dash(e.ProtocolHint), dash(e.Labels["zone"]), dash(e.Labels["pod"]), yesNo(e.Terminating)}
			if wide {
				owner := ""
				if k, n := e.Labels["owner_kind"], e.Labels["owner_name"]; k != "" && n != "" {
					owner = strings.ToLower(k) + "/" + n
				}
				cells = append(cells, dash(owner))
			}
			fmt.Fprintln(tw, strings.Join(cells, "\t"))
		}
		if err := tw.Flush(); err != nil {
			return fmt.Errorf("writing the table: %w", err)
		}
	}
	if c := r.Comparison; c != nil {
		b.WriteString("\nfor comparison, the EndpointSlices by destination's rules (computed here from the API):\n")
		switch {
		case c.Error != "":
			fmt.Fprintf(&b, "%s\n", c.Error)
		default:
			if err := renderSlices(&b, c.Slices, wide); err != nil {
				return err
			}
			if len(c.OnlyDestination)+len(c.OnlySlices) == 0 {
				b.WriteString("destination and the EndpointSlices agree on the published addresses\n")
				break
			}
			var diff []string
			if len(c.OnlyDestination) > 0 {
				diff = append(diff, fmt.Sprintf("destination sends %s, which the slices do not publish", strings.Join(c.OnlyDestination, ", ")))
			}
			if len(c.OnlySlices) > 0 {
				diff = append(diff, fmt.Sprintf("the slices publish %s, which destination does not send", strings.Join(c.OnlySlices, ", ")))
			}
			fmt.Fprintf(&b, "destination and the EndpointSlices differ: %s (destination follows the API through its informers, a moment behind: ask again)\n", strings.Join(diff, "; "))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// renderSlices writes r as a table (wide adds the node, opaque and the
// slice).
func renderSlices(b *strings.Builder, r *SliceReport, wide bool) error {
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
	fmt.Fprintf(b, "%s%s: %d published of %d listed (trust domain %s)\n", r.Authority, opaque, published, len(r.Endpoints), r.TrustDomain)
	if len(r.Endpoints) == 0 {
		return nil
	}
	tw := tabwriter.NewWriter(b, 0, 8, 3, ' ', 0)
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
	return nil
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
