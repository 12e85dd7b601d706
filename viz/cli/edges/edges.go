// Package edges shows plexusctl viz edges: who talks to whom
// (viz/vizquery's edges), whether mesh TLS secures it and with which
// identities, as a table or JSON/YAML.
package edges

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/plexus-mesh/plexus/control/cli/kinds"
	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/viz/cli"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

// Filter keeps the edges between workloads of kind ("" keeps all): the
// destination is one, and the source is one too or has no workload (an
// unmeshed client, or an identity that names a service account).
func Filter(es []vizquery.Edge, kind vizcli.Kind) []vizquery.Edge {
	if kind == "" {
		return es
	}
	obj := kind.Object()
	var out []vizquery.Edge
	for _, e := range es {
		src := e.Source.Kind
		if e.Destination.Kind == obj && (src == obj || src == "" || src == vizquery.KindServiceAccount) {
			out = append(out, e)
		}
	}
	return out
}

// Merge joins the edges of several namespaces: an edge between two of
// them is found from both sides once.
func Merge(lists ...[]vizquery.Edge) []vizquery.Edge {
	seen := map[string]bool{}
	var out []vizquery.Edge
	for _, es := range lists {
		for _, e := range es {
			if id := e.Identity(); !seen[id] {
				seen[id] = true
				out = append(out, e)
			}
		}
	}
	vizquery.SortEdges(out)
	return out
}

// Render writes edges as a table (SRC, DST, SRC_NS, DST_NS, SECURED;
// SRC_CLUSTER first when a source is another cluster's; wide adds
// CLIENT_ID and SERVER_ID) or JSON or YAML (stat's formats).
// qualify names each end with its kind (deploy/web), for tables of mixed
// kinds.
func Render(w io.Writer, es []vizquery.Edge, format string, qualify bool) error {
	if es == nil {
		es = []vizquery.Edge{}
	}
	if done, err := stat.Encode(w, es, format); done || err != nil {
		return err
	}
	wide := format == stat.FormatWide
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	head := []string{"SRC", "DST", "SRC_NS", "DST_NS", "SECURED"}
	clusters := slices.ContainsFunc(es, func(e vizquery.Edge) bool { return e.Source.Cluster != "" })
	if clusters {
		head = append([]string{"SRC_CLUSTER"}, head...)
	}
	if wide {
		head = append(head, "CLIENT_ID", "SERVER_ID")
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	for _, e := range es {
		cells := []string{name(e.Source, qualify), name(e.Destination, qualify), orDash(e.Source.Namespace), orDash(e.Destination.Namespace), secured(e)}
		if clusters {
			cells = append([]string{orDash(e.Source.Cluster)}, cells...)
		}
		if wide {
			cells = append(cells, orDash(e.ClientID), orDash(e.ServerID))
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}

// name is a workload's name, with its kind's short name when qualify or
// when it is a service account.
func name(w vizquery.Workload, qualify bool) string {
	switch {
	case w.Kind == vizquery.KindServiceAccount:
		return "sa/" + w.Name
	case qualify && w.Kind != "":
		return kinds.ShortName(w.Kind) + "/" + w.Name
	}
	return w.Name
}

func secured(e vizquery.Edge) string {
	switch {
	case e.Secured:
		return "√"
	case e.ClientID == "":
		return "unmeshed"
	}
	return "no"
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
