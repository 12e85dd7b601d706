package dashboard

import (
	"fmt"
	"sort"

	"github.com/plexus-mesh/plexus/viz/vizquery"
)

// Graph is a namespace's edges laid out for SVG: workloads in columns by
// their distance from the sources of traffic, edges as curves between
// them.
type Graph struct {
	W, H  int
	Nodes []Node
	Edges []GraphEdge
}

// Node is one workload's box.
type Node struct {
	X, Y, W, H int
	Name, Kind string
	Class      string // "node", plus "unmeshed" or "external" (another namespace)
}

// GraphEdge is one edge's curve, arrow at the destination.
type GraphEdge struct {
	vizquery.Edge
	D            string // the path
	LabelX       int
	LabelY       int
	Label        string
	Class        string // "edge secured" or "edge plain"
	Source, Dest string // the ends' names, for tests and titles
}

const (
	nodeW, nodeH = 170, 40
	colGap       = 110
	rowGap       = 30
	margin       = 20
)

// layout places the workloads of edges: a column per layer, where a
// workload's layer is one more than its furthest source's (cycles cut).
func layout(ns string, edges []vizquery.Edge) Graph {
	layer := map[vizquery.Workload]int{}
	var ids []vizquery.Workload
	add := func(w vizquery.Workload) {
		if _, ok := layer[w]; !ok {
			layer[w] = 0
			ids = append(ids, w)
		}
	}
	for _, e := range edges {
		add(e.Source)
		add(e.Destination)
	}
	// Longest-path layering, at most len(ids) rounds: a cycle stops growing.
	for range ids {
		changed := false
		for _, e := range edges {
			if e.Source == e.Destination {
				continue
			}
			if l := layer[e.Source] + 1; l > layer[e.Destination] && l < len(ids) {
				layer[e.Destination] = l
				changed = true
			}
		}
		if !changed {
			break
		}
	}
	sort.Slice(ids, func(i, j int) bool {
		if layer[ids[i]] != layer[ids[j]] {
			return layer[ids[i]] < layer[ids[j]]
		}
		return ids[i].String() < ids[j].String()
	})
	g := Graph{}
	pos := map[vizquery.Workload]Node{}
	rows := map[int]int{}
	for _, w := range ids {
		l := layer[w]
		n := Node{X: margin + l*(nodeW+colGap), Y: margin + rows[l]*(nodeH+rowGap), W: nodeW, H: nodeH, Name: w.Name, Kind: w.Kind, Class: "node"}
		switch {
		case w.Kind == "" || w.Kind == vizquery.KindServiceAccount:
			n.Class += " unmeshed"
			if w.Kind != "" {
				n.Kind = "ServiceAccount " + w.Namespace
			}
		case w.Namespace != ns:
			n.Class += " external"
			n.Kind = w.Kind + " " + w.Namespace
		}
		rows[l]++
		pos[w] = n
		g.Nodes = append(g.Nodes, n)
		g.W = max(g.W, n.X+n.W+margin)
		g.H = max(g.H, n.Y+n.H+margin)
	}
	for _, e := range edges {
		a, b := pos[e.Source], pos[e.Destination]
		ge := GraphEdge{Edge: e, Class: "edge plain", Source: e.Source.String(), Dest: e.Destination.String()}
		if e.Secured {
			ge.Class = "edge secured"
		}
		x1, y1 := a.X+a.W, a.Y+a.H/2
		x2, y2 := b.X, b.Y+b.H/2
		if b.X <= a.X { // backwards or in the same column: loop around below
			x1, y1 = a.X+a.W/2, a.Y+a.H
			x2, y2 = b.X+b.W/2, b.Y+b.H
			dip := max(y1, y2) + rowGap
			ge.D = fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, x1, dip, x2, dip, x2, y2)
			ge.LabelX, ge.LabelY = (x1+x2)/2, dip-4
			g.H = max(g.H, dip+margin)
		} else {
			mid := (x1 + x2) / 2
			ge.D = fmt.Sprintf("M%d %d C%d %d %d %d %d %d", x1, y1, mid, y1, mid, y2, x2, y2)
			ge.LabelX, ge.LabelY = mid, (y1+y2)/2-4
		}
		switch {
		case e.Protocol == "http":
			ge.Label = fmt.Sprintf("%.1f rps", e.RPS)
		case e.OpenConnections > 0:
			ge.Label = fmt.Sprintf("%.0f conns", e.OpenConnections)
		default:
			ge.Label = "tcp"
		}
		g.Edges = append(g.Edges, ge)
	}
	return g
}
