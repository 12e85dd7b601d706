package discovery

// The cached endpoint set of one destination, as its Get stream updates it.

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/policy/accrual"
	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// sub is the cached state of one destination.
type sub struct {
	dst    string          // the Get path
	ctx    context.Context // ends when the subscription is dropped or the resolver closes
	cancel context.CancelFunc
	first  chan struct{} // closed after the first message or failed stream
	once   sync.Once
	synced atomic.Bool
	// used is set by every pick and Done (no clock read per request);
	// the janitor turns it into seen, the last time it found it set.
	used   atomic.Bool
	seen   int64        // unix nanos; the janitor's (under Resolver.mu)
	active atomic.Int64 // picks not yet Done
	// unresponsive counts the times an endpoint was marked down for
	// leaving a request unanswered past its silence limit (probe.go).
	unresponsive atomic.Uint64

	mu       sync.Mutex
	hasState bool // a message arrived at some point: the fields below are known
	exists   bool
	eps      []*endpoint // every endpoint known, terminating ones too
	labels   map[string]string
	// pickable are the endpoints that take new requests: the ready ones,
	// or, when none is, the terminating ones (as kube-proxy); lbs and brs
	// are their balancer states and, with accrual on, breakers.
	pickable []*endpoint
	lbs      []*balance.Endpoint
	brs      []*balance.Breaker
	acc      *balance.Accrual // failure accrual; nil: off
	// empty is hasState && len(pickable) == 0 and lbsNow is lbs, for
	// Unavailable to read with no lock on every request of a split.
	empty  atomic.Bool
	lbsNow atomic.Pointer[[]*balance.Endpoint]
	zs     zoneSplit // zone-aware balancing (zone.go)
	// changed is closed and replaced whenever pickable may have changed:
	// it wakes the picks waiting for an endpoint.
	changed  chan struct{}
	waiting  int  // picks waiting for an endpoint
	failFast bool // a pick waited FailFastTimeout in vain; none since
	warned   bool
	lastErr  error
}

type endpoint struct {
	Endpoint
	lb          *balance.Endpoint
	br          *balance.Breaker // while pickable with accrual on
	terminating bool
	probing     atomic.Bool     // a probe of it runs (probe.go)
	typical     balance.Typical // sampled by zone-aware picks (zone.go)
}

// touch marks s used (see used).
func (s *sub) touch() {
	if !s.used.Load() {
		s.used.Store(true)
	}
}

func (s *sub) firstDone() {
	s.once.Do(func() { close(s.first) })
}

// apply folds an update into the set (snapshot replaces it) and returns
// the addresses that left it.
func (s *sub) apply(u *destinationpb.Update, snapshot bool) (removed []netip.AddrPort) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hasState, s.warned = true, false
	s.synced.Store(true)
	old := map[netip.AddrPort]*endpoint{}
	for _, ep := range s.eps {
		old[ep.Addr] = ep
	}
	now := monoNow()
	join := balance.Config{DefaultRTT: balance.JoinRTT(s.lbs, now)}
	if snapshot {
		s.eps = nil
	}
	switch v := u.GetUpdate().(type) {
	case *destinationpb.Update_NoEndpoints:
		s.exists = v.NoEndpoints.GetExists()
		s.eps = nil
	case *destinationpb.Update_Add:
		s.exists = true
		s.labels = v.Add.GetMetricLabels()
		for _, wa := range v.Add.GetAddrs() {
			e, ok := toEndpoint(wa, v.Add.GetMetricLabels())
			if !ok {
				continue
			}
			s.eps = slicesDelete(s.eps, e.Addr)
			ep := old[e.Addr]
			if ep == nil || ep.Identity != e.Identity {
				// A new identity at an old address is a new endpoint.
				ep = &endpoint{lb: balance.NewEndpoint(join, wa.GetWeight(), now)}
			}
			ep.lb.SetWeight(wa.GetWeight())
			ep.Endpoint = e
			ep.terminating = wa.GetTerminating()
			s.eps = append(s.eps, ep)
		}
	case *destinationpb.Update_Remove:
		for _, wa := range v.Remove.GetAddrs() {
			if ap, ok := addrPort(wa.GetAddr()); ok {
				s.eps = slicesDelete(s.eps, ap)
			}
		}
	}
	kept := make(map[*endpoint]bool, len(s.eps))
	for _, ep := range s.eps {
		kept[ep] = true
	}
	for a, ep := range old {
		if !kept[ep] {
			removed = append(removed, a)
		}
	}
	s.rebuild()
	return removed
}

// rebuild recomputes pickable and its breakers after eps or acc changed,
// and wakes the picks waiting for an endpoint.
func (s *sub) rebuild() {
	var ready, terminating []*endpoint
	for _, ep := range s.eps {
		if ep.terminating {
			terminating = append(terminating, ep)
		} else {
			ready = append(ready, ep)
		}
	}
	pickable := ready
	if len(ready) == 0 {
		pickable = terminating
	}
	in := make(map[*endpoint]bool, len(pickable))
	for _, ep := range pickable {
		in[ep] = true
	}
	for _, ep := range s.pickable {
		if !in[ep] && ep.br != nil {
			ep.br.Remove()
			ep.br = nil
		}
	}
	s.pickable = pickable
	s.empty.Store(s.hasState && len(pickable) == 0)
	s.lbs = make([]*balance.Endpoint, len(pickable))
	s.brs = nil
	if s.acc != nil {
		s.brs = make([]*balance.Breaker, len(pickable))
	}
	for i, ep := range pickable {
		s.lbs[i] = ep.lb
		if s.acc != nil {
			if ep.br == nil {
				ep.br = s.acc.Add(ep.lb)
			}
			s.brs[i] = ep.br
		}
	}
	lbs := s.lbs // a copy of the header: rebuild replaces s.lbs, never the array
	s.lbsNow.Store(&lbs)
	s.zs.split(s.pickable, s.lbs, s.brs)
	if len(pickable) > 0 {
		s.failFast = false
	}
	if s.changed != nil {
		close(s.changed)
	}
	s.changed = make(chan struct{})
}

// setAccrual turns failure accrual on with c, or off (nil), unless it is
// already so; a new config starts every endpoint afresh. s.mu is held.
// Two parents with different configs sharing this backend would reset
// each other's breakers: the last one asked wins.
func (s *sub) setAccrual(c *accrual.Config) {
	switch {
	case c == nil && s.acc == nil:
		return
	case c != nil && s.acc != nil && s.acc.Config() == *c:
		return
	}
	for _, ep := range s.pickable {
		if ep.br != nil {
			ep.br.Remove()
			ep.br = nil
		}
	}
	s.acc = nil
	if c != nil {
		// Compile validated c; an invalid one leaves accrual off.
		s.acc, _ = balance.NewAccrual(*c)
	}
	s.rebuild()
}

func slicesDelete(eps []*endpoint, a netip.AddrPort) []*endpoint {
	for i, ep := range eps {
		if ep.Addr == a {
			return append(eps[:i:i], eps[i+1:]...)
		}
	}
	return eps
}

func addrPort(a *destinationpb.TcpAddress) (netip.AddrPort, bool) {
	ip, ok := netip.AddrFromSlice(a.GetIp())
	if !ok || a.GetPort() == 0 || a.GetPort() > 65535 {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ip.Unmap(), uint16(a.GetPort())), true
}

// toEndpoint converts a WeightedAddr; false when its address is unusable.
// An unparsable identity makes the endpoint unusable too: sending
// plaintext to a peer that was meant to be meshed would be a downgrade.
func toEndpoint(wa *destinationpb.WeightedAddr, setLabels map[string]string) (Endpoint, bool) {
	ap, ok := addrPort(wa.GetAddr())
	if !ok {
		return Endpoint{}, false
	}
	e := Endpoint{Addr: ap, Opaque: wa.GetProtocolHint().GetProtocol() == destinationpb.ProtocolHint_OPAQUE}
	if id := wa.GetTlsIdentity().GetSpiffeId(); id != "" {
		parsed, err := spiffe.Parse(id)
		if err != nil {
			return Endpoint{}, false
		}
		e.Identity = parsed
	}
	if wa.GetVia() != nil {
		if e.Via, ok = addrPort(wa.GetVia()); !ok {
			return Endpoint{}, false
		}
	}
	if len(setLabels)+len(wa.GetMetricLabels()) > 0 {
		e.Labels = make(map[string]string, len(setLabels)+len(wa.GetMetricLabels()))
		for k, v := range setLabels {
			e.Labels[k] = v
		}
		for k, v := range wa.GetMetricLabels() {
			e.Labels[k] = v
		}
	}
	return e, true
}
