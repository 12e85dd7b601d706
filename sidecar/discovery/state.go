package discovery

// The balancer's state for diagnostics: the admin /endpoints document and
// the outbound_http_balancer_* metrics, read from the endpoint sets when
// asked (nothing per request).

import (
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// EndpointSet is one destination's endpoint set as the balancer sees it.
type EndpointSet struct {
	Destination    string            `json:"destination"`
	Labels         map[string]string `json:"labels,omitempty"`
	FailureAccrual bool              `json:"failureAccrual"`
	// Waiting are the picks waiting for an endpoint; FailFast, that one
	// waited in vain and picks fail at once until an endpoint returns.
	Waiting  int  `json:"waiting"`
	FailFast bool `json:"failFast"`
	// Ejections and Probes count failure accrual's ejections and probe
	// requests since it was last configured for this set.
	Ejections uint64 `json:"ejections,omitempty"`
	Probes    uint64 `json:"probes,omitempty"`
	// Unresponsive counts the times an endpoint was marked down for
	// leaving a request unanswered past its silence limit, since the set
	// was created.
	Unresponsive uint64 `json:"unresponsive,omitempty"`
	// LocalZone is set while zone-aware balancing is on: the proxy's
	// zone; LocalRequests and RemoteRequests count its picks by where
	// they went since the set was created.
	LocalZone      string          `json:"localZone,omitempty"`
	LocalRequests  uint64          `json:"localRequests,omitempty"`
	RemoteRequests uint64          `json:"remoteRequests,omitempty"`
	Endpoints      []EndpointState `json:"endpoints"`
}

// EndpointState is one endpoint's balancer state.
type EndpointState struct {
	Addr     string `json:"addr"`
	Identity string `json:"identity,omitempty"`
	Zone     string `json:"zone,omitempty"`
	// State: ready, terminating (no new requests while another is
	// ready), unresponsive (marked down until it answers or accepts a
	// probe connection), or with failure accrual ejected, probing (its
	// probe is due) and probe-in-flight.
	State string `json:"state"`
	// SilenceMs is how long requests have waited on it with no response
	// byte; 0 while none waits.
	SilenceMs float64 `json:"silenceMillis,omitempty"`
	Pending   int64   `json:"pending"`
	Weight    uint32  `json:"weight"`
	EWMAms    float64 `json:"ewmaMillis"`    // the peak-EWMA RTT estimate
	TypicalMs float64 `json:"typicalMillis"` // the typical RTT (balance.Typical; 0: no answer yet)
	// ConsecutiveFailures and PenaltyLeftMs, with failure accrual.
	ConsecutiveFailures int64   `json:"consecutiveFailures,omitempty"`
	PenaltyLeftMs       float64 `json:"penaltyLeftMillis,omitempty"`
}

// StateUnresponsive is the State of an endpoint marked down (probe.go).
const StateUnresponsive = "unresponsive"

// Ready reports whether the endpoint takes new requests now.
func (e EndpointState) Ready() bool {
	return e.State == balance.StateReady.String() || e.State == balance.StateProbing.String()
}

// Endpoints returns every endpoint set the resolver holds, by destination.
func (r *Resolver) Endpoints() []EndpointSet {
	r.mu.Lock()
	subs := make([]*sub, 0, len(r.subs))
	for _, s := range r.subs {
		subs = append(subs, s)
	}
	r.mu.Unlock()
	now := monoNow()
	out := make([]EndpointSet, 0, len(subs))
	for _, s := range subs {
		if set, ok := s.state(now); ok {
			out = append(out, set)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Destination < out[j].Destination })
	return out
}

// state is s as an EndpointSet; false before destination answered.
func (s *sub) state(now int64) (EndpointSet, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.hasState || !s.exists {
		return EndpointSet{}, false
	}
	set := EndpointSet{Destination: s.dst, Labels: s.labels, FailureAccrual: s.acc != nil, Waiting: s.waiting, FailFast: s.failFast,
		Unresponsive: s.unresponsive.Load(), Endpoints: make([]EndpointState, 0, len(s.eps))}
	if s.acc != nil {
		st := s.acc.Stats()
		set.Ejections, set.Probes = st.Ejections, st.Probes
	}
	if s.zs.zone != "" {
		set.LocalZone, set.LocalRequests, set.RemoteRequests = s.zs.zone, s.zs.localPicks.Load(), s.zs.remotePicks.Load()
	}
	pickable := make(map[*endpoint]bool, len(s.pickable))
	for _, ep := range s.pickable {
		pickable[ep] = true
	}
	for _, ep := range s.eps {
		st := EndpointState{Addr: ep.Addr.String(), Zone: ep.Labels["zone"], State: balance.StateReady.String(),
			Pending: ep.lb.Pending(), Weight: ep.lb.Weight(), EWMAms: float64(ep.lb.Estimate(now)) / 1e6,
			TypicalMs: ep.lb.Typical() / 1e6,
			SilenceMs: float64(ep.lb.Silence(now)) / 1e6}
		if !ep.Identity.IsZero() {
			st.Identity = ep.Identity.String()
		}
		switch {
		case !pickable[ep]:
			st.State = "terminating"
		case ep.lb.Down() && (ep.br == nil || ep.br.State(now) == balance.StateReady):
			st.State = StateUnresponsive
		case ep.br != nil:
			st.State = ep.br.State(now).String()
			st.ConsecutiveFailures = ep.br.ConsecutiveFailures()
			if end, ok := ep.br.PenaltyEnd(); ok && end > now {
				st.PenaltyLeftMs = float64(end-now) / 1e6
			}
		}
		set.Endpoints = append(set.Endpoints, st)
	}
	sort.Slice(set.Endpoints, func(i, j int) bool { return set.Endpoints[i].Addr < set.Endpoints[j].Addr })
	return set, true
}

// backendLabels are the backend_* label values of a set: the Service's
// namespace and name from destination's labels, and the port.
func (set EndpointSet) backendLabels() (ns, name, port string) {
	ns, name = set.Labels["namespace"], set.Labels["service"]
	if ap, err := netip.ParseAddrPort(set.Destination); err == nil {
		return ns, name, strconv.Itoa(int(ap.Port()))
	}
	if i := strings.LastIndexByte(set.Destination, ':'); i >= 0 {
		port = set.Destination[i+1:]
	}
	return ns, name, port
}
