package dashboard

import (
	"strings"
	"testing"

	"github.com/plexus-mesh/plexus/viz/vizquery"
)

func TestLayoutColumnsAndCycles(t *testing.T) {
	w := func(name string) vizquery.Workload {
		return vizquery.Workload{Namespace: "demo", Kind: "Deployment", Name: name}
	}
	edges := []vizquery.Edge{
		{Source: w("load"), Destination: w("web"), Secured: true, Protocol: "http", RPS: 5},
		{Source: w("web"), Destination: w("books"), Secured: true, Protocol: "http"},
		{Source: w("books"), Destination: w("web"), Protocol: "tcp", OpenConnections: 2}, // a cycle
		{Source: vizquery.Workload{Name: vizquery.Unmeshed}, Destination: w("web"), Protocol: "http"},
		{Source: w("web"), Destination: vizquery.Workload{Namespace: "db", Kind: "StatefulSet", Name: "pg"}, Secured: true, Protocol: "tcp"},
	}
	g := layout("demo", edges)
	x := map[string]int{}
	class := map[string]string{}
	for _, n := range g.Nodes {
		x[n.Name], class[n.Name] = n.X, n.Class
		if n.X+n.W > g.W || n.Y+n.H > g.H {
			t.Errorf("node %s outside the %dx%d graph", n.Name, g.W, g.H)
		}
	}
	if len(g.Nodes) != 5 || len(g.Edges) != 5 {
		t.Fatalf("%d nodes, %d edges", len(g.Nodes), len(g.Edges))
	}
	if !(x["load"] < x["web"] && x["web"] < x["books"] && x["unmeshed"] == x["load"] && x["pg"] > x["web"]) {
		t.Errorf("columns %v", x)
	}
	if class["unmeshed"] != "node unmeshed" || class["pg"] != "node external" || class["web"] != "node" {
		t.Errorf("classes %v", class)
	}
	back := g.Edges[2]
	if back.Class != "edge plain" || back.Label != "2 conns" || !strings.HasPrefix(back.D, "M") || back.LabelY >= g.H {
		t.Errorf("the edge back from books: %+v", back)
	}
	if g.Edges[0].Class != "edge secured" || g.Edges[0].Label != "5.0 rps" {
		t.Errorf("load→web %+v", g.Edges[0])
	}
	if e := layout("demo", nil); len(e.Nodes) != 0 || len(e.Edges) != 0 {
		t.Errorf("empty layout %+v", e)
	}
}
