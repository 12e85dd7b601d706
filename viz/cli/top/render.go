package top

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/viz/cli/tapview"
)

// Render writes rows as a table, at most max of them (0: all) and a line
// saying how many more there are.
func Render(w io.Writer, rows []Row, opts Options, max int) error {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	path := "PATH"
	if opts.Routes {
		path = "ROUTE"
	}
	head := []string{"SOURCE", "DESTINATION", "METHOD", path, "COUNT", "BEST", "WORST", "LAST", "SUCCESS"}
	if opts.HideSources {
		head = head[1:]
	}
	fmt.Fprintln(tw, strings.Join(head, "\t"))
	shown := rows
	if max > 0 && len(rows) > max {
		shown = rows[:max]
	}
	for _, r := range shown {
		sr := r.SuccessRate()
		// What the traffic sent is escaped: no terminal control sequences.
		cells := []string{tapview.Printable(r.Source), tapview.Printable(r.Destination), tapview.Printable(r.Method), tapview.Printable(r.Path), strconv.Itoa(r.Count),
			stat.Number(&r.Best, 0, "ms"), stat.Number(&r.Worst, 0, "ms"), stat.Number(&r.Last, 0, "ms"), stat.Percent(&sr, 2)}
		if opts.HideSources {
			cells = cells[1:]
		}
		fmt.Fprintln(tw, strings.Join(cells, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	if len(shown) < len(rows) {
		_, err := fmt.Fprintf(w, "(%d more not shown)\n", len(rows)-len(shown))
		return err
	}
	return nil
}

// Terminal escapes: cursor home, then clear the screen.
const clearScreen = "\x1b[H\x1b[2J"

// TerminalInterval is the least time between two draws on a terminal.
const TerminalInterval = 500 * time.Millisecond

// Session feeds a tap's events to a Table and draws it while the tap
// runs: in place on a terminal (TTY), else as one plain table after
// another; and once more when the tap ends.
type Session struct {
	Out  io.Writer
	TTY  bool
	Opts Options
	// Title heads the screen on a terminal.
	Title string
	// MaxRows bounds the rows drawn on a terminal (0: all); plain tables
	// show every row.
	MaxRows int
	// Now stamps each plain table; nil is time.Now.
	Now func() time.Time

	mu    sync.Mutex
	table *Table
	dirty bool
}

// Add takes one event; it is the tap's callback.
func (s *Session) Add(ev tapapi.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.table == nil {
		s.table = New(s.Opts)
	}
	s.table.Add(ev)
	if ev.Type == tapapi.ResponseEnd {
		s.dirty = true
	}
	return nil
}

// Draw draws the table if a request ended since the last draw, or
// always when force.
func (s *Session) Draw(force bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.table == nil {
		s.table = New(s.Opts)
	}
	if !s.dirty && !force {
		return nil
	}
	s.dirty = false
	rows, n := s.table.Rows(), s.table.Requests()
	var b strings.Builder
	if s.TTY {
		b.WriteString(clearScreen)
		fmt.Fprintf(&b, "%s  (%d requests; Ctrl-C to quit)\n\n", s.Title, n)
		if err := Render(&b, rows, s.Opts, s.MaxRows); err != nil {
			return err
		}
	} else {
		now := time.Now
		if s.Now != nil {
			now = s.Now
		}
		fmt.Fprintf(&b, "%s  %d requests\n", now().UTC().Format(time.TimeOnly), n)
		if err := Render(&b, rows, s.Opts, 0); err != nil {
			return err
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(s.Out, b.String())
	return err
}

// Run runs tap with Add as its callback, draws on every tick (nil: never)
// while it runs, and once more when it returns; it returns tap's error.
func (s *Session) Run(ctx context.Context, tap func(ctx context.Context, fn func(tapapi.Event) error) error, ticks <-chan time.Time) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if s.TTY {
		if err := s.Draw(true); err != nil {
			return err
		}
	}
	done := make(chan error, 1)
	go func() { done <- tap(ctx, s.Add) }()
	for {
		select {
		case err := <-done:
			if derr := s.Draw(true); err == nil {
				err = derr
			}
			return err
		case <-ticks:
			if err := s.Draw(false); err != nil {
				cancel()
				<-done
				return err
			}
		}
	}
}
