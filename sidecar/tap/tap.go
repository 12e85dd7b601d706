// Package tap lets the tap service watch live requests through the proxy
// (ARCHITECTURE.md §10). A Hub holds the open sessions; the request pipeline asks
// it, at each request's start, whether anyone watches. With no session open
// that question is one atomic load and nothing else is done or recorded.
//
// A session's events wait in a bounded queue for its gRPC stream; when the
// tapper reads too slowly, events are dropped and counted, never queued
// without bound.
package tap

import (
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
	"github.com/plexus-mesh/plexus/mesh/api/tappb"
)

// Limits of a proxy's tap server.
const (
	// MaxSessions is how many sessions may be open at once; more are
	// refused (RESOURCE_EXHAUSTED).
	MaxSessions = 8
	// MaxRequestBytes bounds a session's request (its filter).
	MaxRequestBytes = tapapi.MaxRequestBytes
	// QueueLen is how many events a session holds for a slow reader.
	QueueLen = 256
	// DefaultMaxRPS bounds a session's requests per second when it asks
	// for none.
	DefaultMaxRPS = 100
	// MaxHeaders, MaxHeaderValue and MaxHeaderBytes bound what a
	// request-start event carries of the request's headers; MaxName and
	// MaxValue, its other strings (method, scheme, header names; path,
	// authority, route): an event stays under ~8 KiB whatever the request.
	MaxHeaders     = 32
	MaxHeaderValue = 256
	MaxHeaderBytes = 4096
	MaxName        = tapapi.MaxName
	MaxValue       = 1024
	// MaxRedactionNames bounds each of a session's lists of names to
	// redact or show (redact_headers, show_headers, redact_query_params,
	// show_query_params); each name is at most MaxName bytes.
	MaxRedactionNames = tapapi.MaxRedactionNames
)

// Redacted replaces the value of a redacted header or query parameter.
const Redacted = tapapi.Redacted

// Info is what the pipeline knows of a request at its start.
type Info struct {
	Direction           string
	Source, Destination netip.AddrPort
	// SourceID and DestinationID are the ends' mesh identities, when the
	// request travels over mesh mTLS ("" otherwise).
	SourceID, DestinationID string
	TLS                     bool
	Method, Scheme          string
	Authority, Path, Route  string
	// Headers lists the request's headers (called only when a session
	// matches).
	Headers func(fn func(name, value string))
}

// Hub is the proxy's set of tap sessions.
type Hub struct {
	open     atomic.Int32
	sessions atomic.Pointer[[]*session] // copied on change
	mu       sync.Mutex
	dropped  prometheus.Counter
	events   prometheus.Counter
	gauge    prometheus.Gauge
}

// NewHub returns a Hub whose metrics are registered on reg (nil: none).
func NewHub(reg prometheus.Registerer) *Hub {
	h := &Hub{
		dropped: prometheus.NewCounter(prometheus.CounterOpts{Name: "tap_events_dropped_total",
			Help: "Tap events dropped because a tap session read too slowly."}),
		events: prometheus.NewCounter(prometheus.CounterOpts{Name: "tap_events_total",
			Help: "Tap events queued for tap sessions."}),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{Name: "tap_sessions",
			Help: "Tap sessions open."}),
	}
	if reg != nil {
		reg.MustRegister(h.dropped, h.events, h.gauge)
	}
	return h
}

// Active reports whether any session is open: the pipeline's only cost
// when no one taps.
func (h *Hub) Active() bool { return h != nil && h.open.Load() > 0 }

// Start offers a request to the open sessions and returns its handle for
// the response's events, nil when no session takes it.
func (h *Hub) Start(info *Info) *Tapped {
	ss := h.sessions.Load()
	if ss == nil {
		return nil
	}
	var t *Tapped
	now := time.Now()
	for _, s := range *ss {
		if !s.filter.matches(info) || !s.admit(now) {
			continue
		}
		if s.full() {
			// The reader is behind: the request's events would all be
			// dropped, so none is built.
			s.drop(h, tapapi.EventsPerRequest)
			continue
		}
		if t == nil {
			t = &Tapped{start: now, info: info, hub: h}
		}
		id := s.seq.Add(1)
		t.hits = append(t.hits, hit{s: s, id: id})
		ev := t.event(id, now)
		ev.Event = &tappb.TapEvent_RequestStart{RequestStart: s.requestStart(info)}
		s.send(h, ev)
	}
	return t
}

// add opens a session; false when MaxSessions are open.
func (h *Hub) add(s *session) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	var cur []*session
	if p := h.sessions.Load(); p != nil {
		cur = *p
	}
	if len(cur) >= MaxSessions {
		return false
	}
	next := append(append(make([]*session, 0, len(cur)+1), cur...), s)
	h.sessions.Store(&next)
	h.open.Store(int32(len(next)))
	h.gauge.Set(float64(len(next)))
	return true
}

// remove closes a session.
func (h *Hub) remove(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var next []*session
	if p := h.sessions.Load(); p != nil {
		for _, o := range *p {
			if o != s {
				next = append(next, o)
			}
		}
	}
	h.sessions.Store(&next)
	h.open.Store(int32(len(next)))
	h.gauge.Set(float64(len(next)))
}

// Tapped is a request some sessions watch.
type Tapped struct {
	start time.Time
	info  *Info
	hits  []hit
	hub   *Hub
}

type hit struct {
	s  *session
	id uint64
}

// Response records the response's headers.
func (t *Tapped) Response(status int) {
	if t == nil {
		return
	}
	now := time.Now()
	for _, x := range t.hits {
		ev := t.event(x.id, now)
		ev.Event = &tappb.TapEvent_ResponseStart{ResponseStart: &tappb.ResponseStart{
			Status: uint32(status), SinceRequestNanos: int64(now.Sub(t.start))}}
		x.s.send(t.hub, ev)
	}
}

// End records the end of the exchange: the status, the gRPC status ("":
// not gRPC), the proxy's reason when it ended early ("" when well), and
// the response body's bytes (-1: unknown).
func (t *Tapped) End(status int, grpcStatus, reason string, bytes int64) {
	if t == nil {
		return
	}
	now := time.Now()
	end := &tappb.ResponseEnd{SinceRequestNanos: int64(now.Sub(t.start)), ResponseBytes: bytes, Reason: reason, Status: uint32(status)}
	if grpcStatus != "" {
		if n, ok := parseUint(grpcStatus); ok {
			end.HasGrpcStatus, end.GrpcStatus = true, n
		}
	}
	for _, x := range t.hits {
		ev := t.event(x.id, now)
		ev.Event = &tappb.TapEvent_ResponseEnd{ResponseEnd: end}
		x.s.send(t.hub, ev)
	}
	for _, x := range t.hits {
		x.s.finished()
	}
}

func (t *Tapped) event(id uint64, now time.Time) *tappb.TapEvent {
	i := t.info
	return &tappb.TapEvent{Id: id, UnixNano: now.UnixNano(), Direction: i.Direction,
		Source: addrString(i.Source), Destination: addrString(i.Destination),
		SourceIdentity: i.SourceID, DestinationIdentity: i.DestinationID, Tls: i.TLS}
}

func addrString(a netip.AddrPort) string {
	switch {
	case !a.IsValid():
		return ""
	case a.Port() == 0: // the client's port is not known
		return a.Addr().String()
	}
	return a.String()
}

func parseUint(s string) (uint32, bool) {
	if s == "" || len(s) > 9 {
		return 0, false
	}
	var n uint32
	for _, c := range []byte(s) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + uint32(c-'0')
	}
	return n, true
}

// filter is a session's compiled Filter.
type filter struct {
	direction, method, authority, pathPrefix, route string
	dst, src                                        []addrMatch
	// redact is the session's redaction: a path prefix that reaches into
	// the query string is matched against the path as the events show
	// it, so that it cannot test a redacted value a character at a time.
	redact *tapapi.Redaction
	// prefixQuery is where pathPrefix's '?' is (-1: it has none).
	prefixQuery int
}

type addrMatch struct {
	addr netip.Addr
	port uint16 // 0: any
}

func (m addrMatch) matches(a netip.AddrPort) bool {
	return a.Addr().Unmap() == m.addr && (m.port == 0 || a.Port() == m.port)
}

func compileFilter(f *tappb.Filter, redact *tapapi.Redaction) (filter, error) {
	c := filter{direction: f.GetDirection(), method: f.GetMethod(), authority: strings.ToLower(f.GetAuthority()),
		pathPrefix: f.GetPathPrefix(), route: f.GetRoute(), redact: redact, prefixQuery: strings.IndexByte(f.GetPathPrefix(), '?')}
	switch c.direction {
	case "", "inbound", "outbound":
	default:
		return c, errorf("filter direction %q: want inbound, outbound or empty", c.direction)
	}
	var err error
	if c.dst, err = parseAddrs("destination_addrs", f.GetDestinationAddrs()); err != nil {
		return c, err
	}
	c.src, err = parseAddrs("source_addrs", f.GetSourceAddrs())
	return c, err
}

func parseAddrs(field string, in []string) ([]addrMatch, error) {
	var out []addrMatch
	for _, s := range in {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			out = append(out, addrMatch{ap.Addr().Unmap(), ap.Port()})
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, errorf("filter %s: %q is neither an IP nor IP:port", field, s)
		}
		out = append(out, addrMatch{addr: a.Unmap()})
	}
	return out, nil
}

func (f *filter) matches(i *Info) bool {
	switch {
	case f.direction != "" && f.direction != i.Direction,
		f.method != "" && f.method != i.Method,
		f.authority != "" && !strings.EqualFold(f.authority, i.Authority),
		f.pathPrefix != "" && !f.pathMatches(i.Path),
		f.route != "" && f.route != i.Route:
		return false
	}
	return anyMatch(f.dst, i.Destination) && anyMatch(f.src, i.Source)
}

// pathMatches reports whether path starts with the filter's prefix. A
// prefix without '?' can only reach the path's part before the query, the
// same in the redacted path; one with '?' is matched against the redacted
// path (built only when the part before the query matches).
func (f *filter) pathMatches(path string) bool {
	if f.prefixQuery < 0 {
		return strings.HasPrefix(path, f.pathPrefix)
	}
	return strings.HasPrefix(path, f.pathPrefix[:f.prefixQuery+1]) && strings.HasPrefix(f.redact.Path(path), f.pathPrefix)
}

func anyMatch(ms []addrMatch, a netip.AddrPort) bool {
	if len(ms) == 0 {
		return true
	}
	for _, m := range ms {
		if m.matches(a) {
			return true
		}
	}
	return false
}
