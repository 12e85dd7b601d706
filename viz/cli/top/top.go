// Package top aggregates a tap's events into plexusctl viz top's table:
// one row per source, destination, method and path (or route), with its
// request count, best, worst and last latency and success rate over the
// session, hottest first; and draws it, in place on a terminal or as
// plain tables when the output is not one.
package top

import (
	"cmp"
	"slices"
	"strings"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/viz/cli/tapview"
)

// Options shape the rows.
type Options struct {
	// HideSources groups sources together (the SOURCE column is left out).
	HideSources bool
	// Routes groups by the route a request matched instead of its path.
	Routes bool
}

// Key is one row.
type Key struct {
	Source      string `json:"source,omitempty"`
	Destination string `json:"destination"`
	Method      string `json:"method"`
	// Path is the request's path without its query, or its route with
	// Options.Routes ("[default]" when it matched none named).
	Path string `json:"path"`
}

// Row is one key's figures; latencies (time to the response's start) in
// ms.
type Row struct {
	Key
	Count     int     `json:"count"`
	Successes int     `json:"successes"`
	Best      float64 `json:"bestMs"`
	Worst     float64 `json:"worstMs"`
	Last      float64 `json:"lastMs"`
}

// SuccessRate is Successes/Count, 0..1.
func (r Row) SuccessRate() float64 {
	if r.Count == 0 {
		return 0
	}
	return float64(r.Successes) / float64(r.Count)
}

// MaxOpen bounds the requests waiting for their end: an end the tap
// dropped would otherwise keep its request forever.
const MaxOpen = 10000

// pending is a request seen starting, waiting for its end.
type pending struct {
	key     Key
	seq     uint64
	status  int
	latency float64
	started bool // a response started
}

// Table aggregates events; its zero value is not ready, use New.
type Table struct {
	opts Options
	rows map[Key]*Row
	open map[string]*pending
	seq  uint64
}

// New returns an empty table.
func New(opts Options) *Table {
	return &Table{opts: opts, rows: map[Key]*Row{}, open: map[string]*pending{}}
}

// Add takes one event. A request counts when it ends: it succeeded when
// it was answered with a status below 500, its gRPC status (if any) is OK
// and it was not cut short. Its latency is the time to its response's start (its
// duration when no response started).
func (t *Table) Add(ev tapapi.Event) {
	switch ev.Type {
	case tapapi.RequestStart:
		t.seq++
		t.open[ev.ID] = &pending{key: t.key(ev), seq: t.seq}
		if len(t.open) > MaxOpen {
			t.forgetOldest()
		}
	case tapapi.ResponseStart:
		if p := t.open[ev.ID]; p != nil {
			p.status, p.latency, p.started = ev.Status, ev.LatencyMs, true
		}
	case tapapi.ResponseEnd:
		p := t.open[ev.ID]
		if p == nil {
			return // its start was dropped, or came before the session
		}
		delete(t.open, ev.ID)
		latency, status := p.latency, p.status
		if !p.started {
			latency = ev.DurationMs
		}
		if ev.Status != 0 {
			status = ev.Status // the end repeats it: its response start may be dropped
		}
		ok := status != 0 && status < 500 && ev.Reason == "" && (ev.GRPCStatus == nil || *ev.GRPCStatus == 0)
		r := t.rows[p.key]
		if r == nil {
			r = &Row{Key: p.key, Best: latency, Worst: latency}
			t.rows[p.key] = r
		}
		r.Count++
		if ok {
			r.Successes++
		}
		r.Best, r.Worst, r.Last = min(r.Best, latency), max(r.Worst, latency), latency
	}
}

// forgetOldest drops the older half of the open requests.
func (t *Table) forgetOldest() {
	cut := t.seq - MaxOpen/2
	for id, p := range t.open {
		if p.seq <= cut {
			delete(t.open, id)
		}
	}
}

func (t *Table) key(ev tapapi.Event) Key {
	k := Key{Destination: tapview.Name(ev.Destination), Method: ev.Method}
	if !t.opts.HideSources {
		k.Source = tapview.Name(ev.Source)
	}
	if t.opts.Routes {
		k.Path = cmp.Or(ev.Route, "[default]")
	} else {
		k.Path, _, _ = strings.Cut(ev.Path, "?")
	}
	return k
}

// Rows returns the rows, the most requests first (then by key).
func (t *Table) Rows() []Row {
	out := make([]Row, 0, len(t.rows))
	for _, r := range t.rows {
		out = append(out, *r)
	}
	slices.SortFunc(out, func(a, b Row) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), cmp.Compare(a.Source, b.Source), cmp.Compare(a.Destination, b.Destination),
			cmp.Compare(a.Method, b.Method), cmp.Compare(a.Path, b.Path))
	})
	return out
}

// Requests is the number of requests counted.
func (t *Table) Requests() int {
	n := 0
	for _, r := range t.rows {
		n += r.Count
	}
	return n
}
