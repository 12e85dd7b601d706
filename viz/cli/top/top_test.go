package top

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/testsupport/goldentest"
)

func intp(i int) *int { return &i }

// exchange is the events of one request from src to dst.
type exchange struct {
	id, src, dst, method, path, route string
	status                            int // 0: no response started
	latency, duration                 float64
	grpc                              *int
	reason                            string
}

func (x exchange) events() []tapapi.Event {
	base := tapapi.Event{ID: x.id, Source: tapapi.Peer{Addr: x.src + ":40000"}, Destination: tapapi.Peer{Addr: x.dst + ":8080", Pod: x.dst}}
	if strings.HasPrefix(x.src, "load") {
		base.Source.Pod = x.src
	}
	req, rsp, end := base, base, base
	req.Type, req.Method, req.Path, req.Route = tapapi.RequestStart, x.method, x.path, x.route
	rsp.Type, rsp.Status, rsp.LatencyMs = tapapi.ResponseStart, x.status, x.latency
	end.Type, end.DurationMs, end.GRPCStatus, end.Reason = tapapi.ResponseEnd, x.duration, x.grpc, x.reason
	if x.status == 0 {
		return []tapapi.Event{req, end}
	}
	return []tapapi.Event{req, rsp, end}
}

func sample() []tapapi.Event {
	var evs []tapapi.Event
	for _, x := range []exchange{
		{id: "1", src: "load-1", dst: "web-1", method: "GET", path: "/books?id=1", route: "books", status: 200, latency: 3, duration: 4},
		{id: "2", src: "load-1", dst: "web-1", method: "GET", path: "/books?id=2", route: "books", status: 503, latency: 9, duration: 9},
		{id: "3", src: "load-1", dst: "web-1", method: "GET", path: "/books", route: "books", status: 200, latency: 1, duration: 2},
		{id: "4", src: "10.0.0.9", dst: "web-1", method: "POST", path: "/vote", status: 200, latency: 0.25, duration: 1, grpc: intp(0)},
		{id: "5", src: "10.0.0.9", dst: "web-1", method: "POST", path: "/vote", status: 200, latency: 0.5, duration: 1, grpc: intp(14)},
		{id: "6", src: "load-1", dst: "web-2", method: "GET", path: "/books", route: "books", status: 200, latency: 2, duration: 3, reason: "reset"},
		{id: "7", src: "load-1", dst: "web-2", method: "GET", path: "/books", route: "books", duration: 30, reason: "connection refused"},
	} {
		evs = append(evs, x.events()...)
	}
	// An end whose start the tap dropped, and a start without end.
	evs = append(evs, tapapi.Event{Type: tapapi.ResponseEnd, ID: "99"}, tapapi.Event{Type: tapapi.RequestStart, ID: "100", Method: "GET", Path: "/open"})
	return evs
}

func TestAggregate(t *testing.T) {
	tb := New(Options{})
	for _, ev := range sample() {
		tb.Add(ev)
	}
	rows := tb.Rows()
	if len(rows) != 3 || tb.Requests() != 7 {
		t.Fatalf("%d rows, %d requests: %+v", len(rows), tb.Requests(), rows)
	}
	books := rows[0]
	want := Row{Key: Key{Source: "load-1", Destination: "web-1", Method: "GET", Path: "/books"}, Count: 3, Successes: 2, Best: 1, Worst: 9, Last: 1}
	if books != want {
		t.Errorf("hottest row %+v, want %+v", books, want)
	}
	for _, r := range rows[1:] {
		switch r.Destination {
		case "web-1": // gRPC status 14 fails
			if r.Source != "10.0.0.9" || r.Count != 2 || r.Successes != 1 || r.Best != 0.25 || r.Last != 0.5 {
				t.Errorf("vote row %+v", r)
			}
		case "web-2": // a reset fails; no response: the duration is the latency
			if r.Count != 2 || r.Successes != 0 || r.Worst != 30 || r.Last != 30 {
				t.Errorf("web-2 row %+v", r)
			}
		}
	}
	if len(tb.open) != 1 {
		t.Errorf("%d requests open, want the one without end", len(tb.open))
	}

	byRoute := New(Options{Routes: true, HideSources: true})
	for _, ev := range sample() {
		byRoute.Add(ev)
	}
	var keys []string
	for _, r := range byRoute.Rows() {
		keys = append(keys, r.Destination+" "+r.Path)
	}
	if got := strings.Join(keys, ","); got != "web-1 books,web-1 [default],web-2 books" {
		t.Errorf("by route: %s", got)
	}
}

func TestOpenRequestsBounded(t *testing.T) {
	tb := New(Options{})
	for i := range MaxOpen + 10 {
		tb.Add(tapapi.Event{Type: tapapi.RequestStart, ID: string(rune('a'+i%26)) + strings.Repeat("x", i/26)})
	}
	if len(tb.open) > MaxOpen {
		t.Errorf("%d open requests kept, want at most %d", len(tb.open), MaxOpen)
	}
}

func TestRender(t *testing.T) {
	var all bytes.Buffer
	for _, tc := range []struct {
		name string
		opts Options
		max  int
	}{{"all", Options{}, 0}, {"hide sources, routes", Options{HideSources: true, Routes: true}, 0}, {"two rows", Options{}, 2}} {
		tb := New(tc.opts)
		for _, ev := range sample() {
			tb.Add(ev)
		}
		all.WriteString("# " + tc.name + "\n")
		if err := Render(&all, tb.Rows(), tc.opts, tc.max); err != nil {
			t.Fatal(err)
		}
	}
	goldentest.Golden(t, "render.txt", []byte(all.String()))
}

// fakeTap sends evs, one batch per receive on step (acknowledged on ack,
// if not nil), then ends at the next.
func fakeTap(batches [][]tapapi.Event, step <-chan struct{}, ack chan<- struct{}) func(context.Context, func(tapapi.Event) error) error {
	return func(ctx context.Context, fn func(tapapi.Event) error) error {
		for _, b := range batches {
			select {
			case <-step:
			case <-ctx.Done():
				return nil
			}
			for _, ev := range b {
				if err := fn(ev); err != nil {
					return err
				}
			}
			if ack != nil {
				ack <- struct{}{}
			}
		}
		<-step
		return nil
	}
}

// runSession runs a session over sample() split in two batches, with a
// tick after each batch and one while nothing changed.
func runSession(t *testing.T, s *Session) string {
	t.Helper()
	var out bytes.Buffer
	s.Out = &out
	s.Now = func() time.Time { return time.Date(2026, 11, 24, 10, 0, 5, 0, time.UTC) }
	evs := sample()
	step, ack := make(chan struct{}), make(chan struct{})
	ticks := make(chan time.Time)
	errc := make(chan error, 1)
	go func() {
		errc <- s.Run(context.Background(), fakeTap([][]tapapi.Event{evs[:9], evs[9:]}, step, ack), ticks)
	}()
	step <- struct{}{} // first batch
	<-ack
	ticks <- time.Time{} // draws (requests ended)
	ticks <- time.Time{} // nothing new: no draw
	step <- struct{}{}   // second batch
	<-ack
	ticks <- time.Time{} // draws
	step <- struct{}{}   // the tap ends: the last draw
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return out.String()
}

func TestSessionTerminal(t *testing.T) {
	got := runSession(t, &Session{TTY: true, Title: "plexusctl viz top deploy/web", MaxRows: 2})
	if n := strings.Count(got, clearScreen); n != 4 {
		t.Errorf("%d screens drawn, want 4 (at start, two ticks with news, at the end)", n)
	}
	if !strings.HasPrefix(got, clearScreen) {
		t.Error("the first draw does not clear the screen")
	}
	goldentest.Golden(t, "terminal.txt", []byte(strings.ReplaceAll(got, clearScreen, "<CLEAR>")))
}

func TestSessionPlain(t *testing.T) {
	got := runSession(t, &Session{})
	if strings.Contains(got, "\x1b") {
		t.Error("escape sequences in plain output")
	}
	if n := strings.Count(got, "SOURCE"); n != 3 {
		t.Errorf("%d tables, want 3 (two ticks with news, the end)", n)
	}
	goldentest.Golden(t, "plain.txt", []byte(got))

	// Without ticks (--limit): one table, at the end.
	var out bytes.Buffer
	s := &Session{Out: &out, Now: time.Now}
	step := make(chan struct{}, 3)
	step <- struct{}{}
	step <- struct{}{}
	step <- struct{}{}
	evs := sample()
	if err := s.Run(context.Background(), fakeTap([][]tapapi.Event{evs[:9], evs[9:]}, step, nil), nil); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "SOURCE"); n != 1 {
		t.Errorf("%d tables without ticks, want 1", n)
	}
}

// TestEndCarriesStatus: an end with its status counts even when its
// response start was not seen; a 5xx end fails.
func TestEndCarriesStatus(t *testing.T) {
	tb := New(Options{})
	for _, ev := range []tapapi.Event{
		{Type: tapapi.RequestStart, ID: "a", Method: "GET", Path: "/x"},
		{Type: tapapi.ResponseEnd, ID: "a", Status: 200, DurationMs: 4},
		{Type: tapapi.RequestStart, ID: "b", Method: "GET", Path: "/x"},
		{Type: tapapi.ResponseStart, ID: "b", Status: 200, LatencyMs: 1},
		{Type: tapapi.ResponseEnd, ID: "b", Status: 502, DurationMs: 2},
	} {
		tb.Add(ev)
	}
	r := tb.Rows()[0]
	if r.Count != 2 || r.Successes != 1 || r.Best != 1 || r.Worst != 4 {
		t.Errorf("row %+v: want 2 requests, 1 success, latencies 4 (no start) and 1", r)
	}
}
