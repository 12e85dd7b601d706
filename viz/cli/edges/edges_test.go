package edges

import (
	"bytes"
	"testing"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/testsupport/goldentest"
	"github.com/plexus-mesh/plexus/viz/cli"
	"github.com/plexus-mesh/plexus/viz/vizquery"
)

func id(ns, sa string) string { return "spiffe://cluster.local/ns/" + ns + "/sa/" + sa }

func wl(ns, kind, name string) vizquery.Workload {
	return vizquery.Workload{Namespace: ns, Kind: kind, Name: name}
}

// demo is the demo's edges as seen from plexus-demo, and one from
// another namespace.
func demo() []vizquery.Edge {
	return []vizquery.Edge{
		{Source: wl("plexus-demo", "Deployment", "load"), Destination: wl("plexus-demo", "Deployment", "web"), ClientID: id("plexus-demo", "load"), ServerID: id("plexus-demo", "web"), Secured: true, Protocol: "http", RPS: 10},
		{Source: wl("plexus-demo", "Deployment", "web"), Destination: wl("plexus-demo", "Deployment", "books"), ClientID: id("plexus-demo", "web"), ServerID: id("plexus-demo", "books"), Secured: true, Protocol: "http", RPS: 9},
		{Source: wl("plexus-demo", "Deployment", "web"), Destination: wl("plexus-demo", "StatefulSet", "votes"), ClientID: id("plexus-demo", "web"), ServerID: id("plexus-demo", "votes"), Secured: true, Protocol: "http", RPS: 3},
		{Source: vizquery.Workload{Name: vizquery.Unmeshed}, Destination: wl("plexus-demo", "Deployment", "web"), Protocol: "http", RPS: 1},
		{Source: wl("ops", vizquery.KindServiceAccount, "prober"), Destination: wl("plexus-demo", "Deployment", "books"), ClientID: id("ops", "prober"), Secured: true, Protocol: "tcp"},
		{Source: wl("plexus-demo", "Job", "seed"), Destination: wl("plexus-demo", "Deployment", "books"), ClientID: id("plexus-demo", "seed"), ServerID: id("plexus-demo", "books"), Secured: true, Protocol: "http"},
	}
}

func TestRender(t *testing.T) {
	var out bytes.Buffer
	for _, tc := range []struct {
		kind    vizcli.Kind
		format  string
		qualify bool
	}{
		{vizcli.Deployments, stat.FormatTable, false},
		{vizcli.Deployments, stat.FormatWide, false},
		{"", stat.FormatTable, true},
		{vizcli.StatefulSets, stat.FormatTable, false},
		{"", stat.FormatJSON, false},
		{vizcli.CronJobs, stat.FormatTable, false},
	} {
		out.WriteString("# " + string(tc.kind) + " " + tc.format + "\n")
		if err := Render(&out, Filter(demo(), tc.kind), tc.format, tc.qualify); err != nil {
			t.Fatal(err)
		}
	}
	// A linked cluster's client: its cluster (trust domain) shown.
	linked := append(demo()[:1], vizquery.Edge{Source: vizquery.Workload{Cluster: "b.cluster.local", Namespace: "plexus-demo", Kind: vizquery.KindServiceAccount, Name: "load"},
		Destination: wl("plexus-demo", "Deployment", "web"), ClientID: "spiffe://b.cluster.local/ns/plexus-demo/sa/load", ServerID: id("plexus-demo", "web"), Secured: true, Protocol: "http", RPS: 4})
	for _, format := range []string{stat.FormatTable, stat.FormatWide} {
		out.WriteString("# linked " + format + "\n")
		if err := Render(&out, linked, format, false); err != nil {
			t.Fatal(err)
		}
	}
	goldentest.Golden(t, "render.txt", out.Bytes())
	if err := Render(&out, nil, "xml", false); err == nil {
		t.Error("format xml: no error")
	}
}

func TestMerge(t *testing.T) {
	a, b := demo()[:3], demo()[1:]
	m := Merge(a, b)
	if len(m) != len(demo()) {
		t.Fatalf("%d edges, want %d: %+v", len(m), len(demo()), m)
	}
	for i := 1; i < len(m); i++ {
		if m[i-1].Source.String() > m[i].Source.String() {
			t.Errorf("not sorted by source: %v before %v", m[i-1].Source, m[i].Source)
		}
	}
}
