package metrics

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// seriesOf counts the series of the route families whose labels contain
// route_name=name.
func seriesOf(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "outbound_") {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "route_name" && l.GetValue() == name {
					n++
				}
			}
		}
	}
	return n
}

// A route's series live while a table holds them and are deleted with the
// last hold, backends and statuses included; another route's stay.
func TestRouteSeriesReleased(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(reg, 100)
	parent := Ref{Group: "core", Kind: "Service", Namespace: "ns", Name: "web", Port: "80"}
	use := func(name string) *RouteSeries {
		rs := m.Route(false, parent, Ref{Kind: "HTTPRoute", Namespace: "ns", Name: name})
		rs.Done(time.Millisecond, 200, "", "")
		b := rs.Backend(parent)
		b.Sent()
		b.Done(time.Millisecond, 200, "", "")
		return rs
	}
	old := use("old")
	again := use("old") // a newer table with the same route
	if again != old {
		t.Fatal("the same route got a second set of series")
	}
	keep := use("keep")
	before := seriesOf(t, reg, "old")
	if before == 0 {
		t.Fatal("no series for the route")
	}
	m.ReleaseRoute(old)
	if got := seriesOf(t, reg, "old"); got != before {
		t.Errorf("%d series after the first release, want %d (still held)", got, before)
	}
	m.ReleaseRoute(again)
	if got := seriesOf(t, reg, "old"); got != 0 {
		t.Errorf("%d series after the last release, want 0", got)
	}
	if got := seriesOf(t, reg, "keep"); got != before {
		t.Errorf("the other route has %d series, want %d", got, before)
	}
	_ = keep
	// Held again after deletion: fresh series.
	if rs := use("old"); rs == old {
		t.Error("a released route's series were reused")
	}
}

// Recording a route request and its attempt allocates nothing once the
// series exist.
func TestRouteDoneAllocatesNothing(t *testing.T) {
	m := New(prometheus.NewRegistry(), 100)
	rs := m.Route(false, Ref{Kind: "Service", Name: "web"}, Ref{Kind: "default", Name: "http"})
	b := rs.Backend(Ref{Kind: "Service", Name: "web"})
	allocs := testing.AllocsPerRun(1000, func() {
		b.Sent()
		b.Done(time.Millisecond, 200, "", "")
		rs.Done(time.Millisecond, 200, "", "")
	})
	if allocs != 0 {
		t.Errorf("%v allocations per request, want 0", allocs)
	}
}
