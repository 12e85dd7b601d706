// Package logwatch lets a test see the records a component logs, as the
// events it waits on ("issuer loaded", "certificate request failed"),
// while they still go to the test's own log.
package logwatch

import (
	"context"
	"log/slog"
)

// New returns a logger that shows every record to see, whatever its
// level, and passes on to next those next is enabled for.
func New(next slog.Handler, see func(slog.Record)) *slog.Logger {
	return slog.New(handler{next: next, see: see})
}

type handler struct {
	next slog.Handler
	see  func(slog.Record)
	with []slog.Attr // attributes added by With, shown with each record
}

func (h handler) Enabled(context.Context, slog.Level) bool { return true }

func (h handler) Handle(ctx context.Context, r slog.Record) error {
	shown := r.Clone()
	shown.AddAttrs(h.with...)
	h.see(shown)
	if !h.next.Enabled(ctx, r.Level) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h handler) WithAttrs(as []slog.Attr) slog.Handler {
	return handler{next: h.next.WithAttrs(as), see: h.see, with: append(append([]slog.Attr{}, h.with...), as...)}
}

func (h handler) WithGroup(name string) slog.Handler {
	return handler{next: h.next.WithGroup(name), see: h.see, with: h.with}
}
