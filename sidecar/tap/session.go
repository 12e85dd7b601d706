package tap

import (
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/mesh/api/tappb"
)

// session is one tapper's subscription.
type session struct {
	filter filter
	redact *tapapi.Redaction
	queue  chan *tappb.TapEvent
	// dropped counts events dropped since the stream last reported it.
	dropped atomic.Uint64
	seq     atomic.Uint64
	// limit is how many requests the session takes in all (0: no limit);
	// done closes when that many have ended.
	limit    uint64
	ended    atomic.Uint64
	done     chan struct{}
	doneOnce sync.Once

	mu     sync.Mutex
	tokens float64
	rate   float64
	last   time.Time
}

func newSession(req *tappb.ObserveRequest) (*session, error) {
	redact, err := compileRedaction(req)
	if err != nil {
		return nil, err
	}
	f, err := compileFilter(req.GetFilter(), redact)
	if err != nil {
		return nil, err
	}
	rate := req.GetMaxRps()
	switch {
	case rate < 0 || rate != rate:
		return nil, errorf("max_rps %v: want a positive number or 0", rate)
	case rate == 0:
		rate = DefaultMaxRPS
	}
	// The bucket starts with one request (the first is seen at once,
	// however low the rate) and a tenth of a second's burst.
	s := &session{filter: f, redact: redact, queue: make(chan *tappb.TapEvent, QueueLen),
		limit: uint64(req.GetLimit()), done: make(chan struct{}), rate: rate, tokens: min(1+rate/10, max(rate, 1))}
	return s, nil
}

// compileRedaction is the session's redaction (tapapi.Redaction): the
// defaults, widened and narrowed by the request's lists, each at most
// MaxRedactionNames names of at most MaxName bytes.
func compileRedaction(req *tappb.ObserveRequest) (*tapapi.Redaction, error) {
	for _, l := range []struct {
		field string
		names []string
	}{
		{"redact_headers", req.GetRedactHeaders()}, {"show_headers", req.GetShowHeaders()},
		{"redact_query_params", req.GetRedactQueryParams()}, {"show_query_params", req.GetShowQueryParams()},
	} {
		if len(l.names) > MaxRedactionNames {
			return nil, errorf("%s: %d names, want at most %d", l.field, len(l.names), MaxRedactionNames)
		}
		for _, n := range l.names {
			if len(n) > MaxName {
				return nil, errorf("%s: a name of %d bytes, want at most %d", l.field, len(n), MaxName)
			}
		}
	}
	return tapapi.NewRedaction(req.GetRedactHeaders(), req.GetShowHeaders(), req.GetRedactQueryParams(), req.GetShowQueryParams()), nil
}

// admit takes a request within the session's rate and limit.
func (s *session) admit(now time.Time) bool {
	if s.limit > 0 && s.seq.Load() >= s.limit {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.last.IsZero() {
		s.tokens = min(s.tokens+now.Sub(s.last).Seconds()*s.rate, max(s.rate, 1))
	}
	s.last = now
	if s.tokens < 1 {
		return false
	}
	s.tokens--
	return true
}

// send queues ev, or drops and counts it when the queue is full.
func (s *session) send(h *Hub, ev *tappb.TapEvent) {
	select {
	case s.queue <- ev:
		h.events.Inc()
	default:
		s.drop(h, 1)
	}
}

// full reports whether the queue has no room (a hint: the reader may take
// an event at any time).
func (s *session) full() bool { return len(s.queue) == cap(s.queue) }

// drop counts n events dropped.
func (s *session) drop(h *Hub, n int) {
	s.dropped.Add(uint64(n))
	h.dropped.Add(float64(n))
}

// finished counts a request that ended, closing done at the limit.
func (s *session) finished() {
	if s.limit > 0 && s.ended.Add(1) >= s.limit {
		s.doneOnce.Do(func() { close(s.done) })
	}
}

// requestStart builds a request-start event, every string valid UTF-8
// (protobuf's rule: an invalid one would end the session) and bounded,
// headers and the query string's values redacted (tapapi.Redaction). The
// path is cut before it is redacted, so that the work is bounded (a cut
// name has no value left to show), and after, since a value replaced by
// REDACTED may grow.
func (s *session) requestStart(i *Info) *tappb.RequestStart {
	rs := &tappb.RequestStart{Method: clip(i.Method, MaxName), Scheme: clip(i.Scheme, MaxName),
		Authority: clip(i.Authority, MaxValue), Path: clip(s.redact.Path(clip(i.Path, MaxValue)), MaxValue), Route: clip(i.Route, MaxValue)}
	if i.Headers != nil {
		budget := MaxHeaderBytes
		i.Headers(func(name, value string) {
			if len(rs.Headers) >= MaxHeaders || budget <= 0 {
				return
			}
			n := headerName(name)
			if s.redact.Header(name) { // the whole name: a cut one may have lost its suffix
				value = Redacted
			} else {
				value = clip(value, min(MaxHeaderValue, budget))
			}
			budget -= len(n) + len(value)
			rs.Headers = append(rs.Headers, &tappb.Header{Name: n, Value: value})
		})
	}
	return rs
}

// headerName is the form of a header name in events.
func headerName(n string) string { return strings.ToLower(clip(n, MaxName)) }

// clip returns s as valid UTF-8 (invalid bytes replaced) and at most max
// bytes, cut at a character boundary and marked "…" when cut.
func clip(s string, max int) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

// errInvalid is a tapper's bad request.
type errInvalid struct{ msg string }

func (e *errInvalid) Error() string { return e.msg }

func errorf(format string, a ...any) error { return &errInvalid{fmt.Sprintf(format, a...)} }

// Subscription is an open session, for callers in this process (the gRPC
// server, tests).
type Subscription struct {
	hub *Hub
	s   *session
}

// Subscribe opens a session; an error names a bad request, or says that
// MaxSessions are open.
func (h *Hub) Subscribe(req *tappb.ObserveRequest) (*Subscription, error) {
	s, err := newSession(req)
	if err != nil {
		return nil, err
	}
	if !h.add(s) {
		return nil, ErrTooMany
	}
	return &Subscription{hub: h, s: s}, nil
}

// ErrTooMany: MaxSessions are open.
var ErrTooMany = fmt.Errorf("tap: %d sessions are open already", MaxSessions)

// Events delivers the session's events.
func (sub *Subscription) Events() <-chan *tappb.TapEvent { return sub.s.queue }

// Done closes when the session's limit of requests has ended.
func (sub *Subscription) Done() <-chan struct{} { return sub.s.done }

// TakeDropped returns the events dropped since the last call.
func (sub *Subscription) TakeDropped() uint64 { return sub.s.dropped.Swap(0) }

// Close ends the session.
func (sub *Subscription) Close() { sub.hub.remove(sub.s) }
