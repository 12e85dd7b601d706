package tapview

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/testsupport/goldentest"
)

func intp(i int) *int { return &i }

// events are one HTTP exchange seen inbound, one gRPC exchange seen
// outbound, one reset, a drop report and a pod that could not be tapped.
func events() []tapapi.Event {
	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	web := tapapi.Peer{Addr: "10.0.0.2:8080", Namespace: "shop", Pod: "web-7d9-abc", WorkloadKind: "Deployment", WorkloadName: "web", Identity: "spiffe://cluster.local/ns/shop/sa/web"}
	load := tapapi.Peer{Addr: "10.0.0.1:51234", Namespace: "shop", Pod: "load-1", WorkloadKind: "Deployment", WorkloadName: "load"}
	// A linked cluster's client, named by its identity (tapservice).
	remoteLoad := tapapi.Peer{Addr: "10.245.0.9:40000", Identity: "spiffe://b.cluster.local/ns/shop/sa/load", Cluster: "b.cluster.local", Namespace: "shop", WorkloadKind: "ServiceAccount", WorkloadName: "load"}
	votes := tapapi.Peer{Addr: "10.0.0.3:9090", Namespace: "shop", Pod: "votes-0", WorkloadKind: "StatefulSet", WorkloadName: "votes"}
	in := tapapi.Event{Time: at, ID: "web-7d9-abc:1", Namespace: "shop", Pod: "web-7d9-abc", Direction: "inbound", Source: load, Destination: web, TLS: true}
	out := tapapi.Event{Time: at, ID: "web-7d9-abc:2", Namespace: "shop", Pod: "web-7d9-abc", Direction: "outbound", Source: tapapi.Peer{Addr: "10.0.0.2:40000"}, Destination: votes, TLS: true, Route: "votes-default"}
	with := func(e tapapi.Event, f func(*tapapi.Event)) tapapi.Event { f(&e); return e }
	return []tapapi.Event{
		with(in, func(e *tapapi.Event) {
			e.Type, e.Method, e.Scheme, e.Authority, e.Path = tapapi.RequestStart, "GET", "http", "web.shop:80", "/books?id=7"
			e.Headers = []tapapi.Header{{Name: "authorization", Value: tapapi.Redacted}}
		}),
		with(in, func(e *tapapi.Event) { e.Type, e.Status, e.LatencyMs = tapapi.ResponseStart, 200, 1.2344 }),
		with(in, func(e *tapapi.Event) { e.Type, e.DurationMs, e.ResponseBytes = tapapi.ResponseEnd, 1.5, 512 }),
		with(out, func(e *tapapi.Event) {
			e.Type, e.Method, e.Authority, e.Path = tapapi.RequestStart, "POST", "votes.shop:9090", "/votes.Votes/Cast"
		}),
		with(out, func(e *tapapi.Event) { e.Type, e.Status, e.LatencyMs = tapapi.ResponseStart, 200, 0.4 }),
		with(out, func(e *tapapi.Event) {
			e.Type, e.DurationMs, e.ResponseBytes, e.GRPCStatus = tapapi.ResponseEnd, 0.9, 17, intp(14)
		}),
		with(in, func(e *tapapi.Event) {
			e.Type, e.ID, e.DurationMs, e.Reason = tapapi.ResponseEnd, "web-7d9-abc:3", 30, "reset"
		}),
		with(in, func(e *tapapi.Event) {
			e.Type, e.ID, e.Method, e.Scheme, e.Authority, e.Path = tapapi.RequestStart, "web-7d9-abc:4", "GET", "http", "web.shop:80", "/"
			e.Source = remoteLoad
		}),
		{Type: tapapi.Dropped, Namespace: "shop", Pod: "web-7d9-abc", Count: 12},
		{Type: tapapi.Error, Namespace: "shop", Pod: "web-7d9-def", Message: "connection refused"},
		{Type: "somethingNew", Namespace: "shop", Pod: "web-7d9-abc"},
	}
}

func TestLinesGolden(t *testing.T) {
	for _, format := range []string{FormatLines, FormatWide, FormatJSON} {
		var out, notes bytes.Buffer
		p := Printer{Out: &out, Notes: &notes, Format: format}
		for _, ev := range events() {
			if err := p.Print(ev); err != nil {
				t.Fatal(err)
			}
		}
		name := "lines.txt"
		if format != "" {
			name = format + ".txt"
		}
		got := out.String()
		if format != FormatJSON {
			got += "--- notes\n" + notes.String()
		} else if notes.Len() > 0 {
			t.Errorf("json: notes %q, want every event on stdout", notes.String())
		}
		goldentest.Golden(t, name, []byte(got))
	}
}

func TestJSONRoundTrips(t *testing.T) {
	var out bytes.Buffer
	p := Printer{Out: &out, Format: FormatJSON}
	evs := events()
	for _, ev := range evs {
		if err := p.Print(ev); err != nil {
			t.Fatal(err)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != len(evs) {
		t.Fatalf("%d lines for %d events", len(lines), len(evs))
	}
	for i, l := range lines {
		var ev tapapi.Event
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != evs[i].Type || ev.ID != evs[i].ID {
			t.Errorf("line %d: %+v", i, ev)
		}
	}
}

func TestNamesAndStatuses(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{GRPCStatus(0), "OK"},
		{GRPCStatus(14), "Unavailable"},
		{GRPCStatus(99), "Code(99)"},
		{GRPCStatus(-1), "-1"},
		{Micros(0.0004), "0µs"},
		{Micros(12.3456), "12346µs"},
		{Name(tapapi.Peer{Addr: "10.0.0.1:80"}), "10.0.0.1"},
		{Name(tapapi.Peer{Addr: "[fd00::1]:80"}), "fd00::1"},
		{Name(tapapi.Peer{Addr: "10.0.0.1:80", Pod: "web-1"}), "web-1"},
		{Name(tapapi.Peer{Addr: "10.245.0.9:80", Cluster: "b.cluster.local", Namespace: "shop", WorkloadKind: "ServiceAccount", WorkloadName: "load"}), "b.cluster.local:shop/sa/load"},
		{Name(tapapi.Peer{Addr: "10.0.0.8:80", Namespace: "shop", WorkloadKind: "ServiceAccount", WorkloadName: "load"}), "shop/sa/load"},
		{Resource(tapapi.Peer{Pod: "web-1"}), "po/web-1"},
		{Resource(tapapi.Peer{Pod: "x", WorkloadKind: "Rollout", WorkloadName: "r"}), "rollout/r"},
		{Resource(tapapi.Peer{}), ""},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

func TestPrintable(t *testing.T) {
	for in, want := range map[string]string{
		"/books?id=7":        "/books?id=7",
		"/a b":               `/a\x20b`,
		"/x\x1b[2J":          `/x\x1b[2J`,
		"/über":              "/über",
		"/bad\xff":           `/bad\xff`,
		"/line\nreq id=fake": `/line\nreq\x20id=fake`,
	} {
		if got := Printable(in); got != want {
			t.Errorf("Printable(%q) = %q, want %q", in, got, want)
		}
	}
}
