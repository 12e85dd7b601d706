package discovery

// The cached endpoint set of one destination, as its Get stream updates it.

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plexus-mesh/plexus/control/api/destinationpb"
	"github.com/plexus-mesh/plexus/control/spiffe"
	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// sub is the cached state of one destination.
type sub struct {
	dst    string // the Get path
	cancel context.CancelFunc
	first  chan struct{} // closed after the first message or failed stream
	once   sync.Once
	synced atomic.Bool
	used   atomic.Int64 // unix nanos of the last Pick or Done
	active atomic.Int64 // picks not yet Done

	mu       sync.Mutex
	hasState bool // a message arrived at some point: the fields below are known
	exists   bool
	eps      []*endpoint
	lbs      []*balance.Endpoint // eps' balancer states, in the same order
	warned   bool
	lastErr  error
}

type endpoint struct {
	Endpoint
	lb *balance.Endpoint
}

func (s *sub) touch() { s.used.Store(time.Now().UnixNano()) }

func (s *sub) firstDone() {
	s.once.Do(func() { close(s.first) })
}

// apply folds an update into the set; snapshot replaces it.
func (s *sub) apply(u *destinationpb.Update, snapshot bool) {
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
			s.eps = append(s.eps, ep)
		}
	case *destinationpb.Update_Remove:
		for _, wa := range v.Remove.GetAddrs() {
			if ap, ok := addrPort(wa.GetAddr()); ok {
				s.eps = slicesDelete(s.eps, ap)
			}
		}
	}
	s.lbs = make([]*balance.Endpoint, len(s.eps))
	for i, ep := range s.eps {
		s.lbs[i] = ep.lb
	}
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
