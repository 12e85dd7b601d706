package destination

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// Weight is the weight of every endpoint (all are equal for now).
const Weight = 10000

// translator is one stream's side of a publisher: a bounded queue of the
// messages still to be sent. The publisher pushes without ever blocking;
// when the queue is full the translator overflows: it drops everything,
// and the stream ends with ErrOverflow.
type translator[T any] struct {
	ch         chan T
	overflowed chan struct{}
	once       sync.Once
	onOverflow func()  // counts the overflow
	onQueued   func(T) // counts a queued message
}

func newTranslator[T any](size int, onQueued func(T), onOverflow func()) *translator[T] {
	return &translator[T]{ch: make(chan T, size), overflowed: make(chan struct{}), onQueued: onQueued, onOverflow: onOverflow}
}

// push queues msgs in order, or overflows. It never blocks. Callers
// serialise pushes (the publisher's lock).
func (t *translator[T]) push(msgs ...T) {
	for _, m := range msgs {
		select {
		case <-t.overflowed:
			return
		default:
		}
		select {
		case t.ch <- m:
			t.onQueued(m)
		default:
			t.once.Do(func() {
				close(t.overflowed)
				t.onOverflow()
			})
			return
		}
	}
}

// pump sends queued messages with send until ctx ends, send fails or the
// queue overflows (ErrOverflow). An overflow wins over messages still
// queued: they are stale by then.
func (t *translator[T]) pump(ctx context.Context, send func(T) error) error {
	for {
		select {
		case <-t.overflowed:
			return ErrOverflow
		default:
		}
		select {
		case m := <-t.ch:
			if err := send(m); err != nil {
				return fmt.Errorf("sending update: %w", err)
			}
		case <-t.overflowed:
			return ErrOverflow
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// initialUpdates is the first answer of a Get stream: every current
// endpoint, or NoEndpoints.
func initialUpdates(s *snapshot) []*pb.Update {
	if len(s.endpoints) == 0 {
		return []*pb.Update{noEndpoints(s.exists)}
	}
	return []*pb.Update{addUpdate(s.setLabels, sortedEndpoints(s.endpoints, nil))}
}

// diffUpdates turns a change of snapshot into Get messages, in this order:
// Remove (addresses that went away), Add (new or changed addresses; an Add
// replaces an address), NoEndpoints (when the set became empty or the
// service's existence changed while empty). It returns nil when the
// endpoints did not change.
func diffUpdates(old, cur *snapshot) []*pb.Update {
	var out []*pb.Update
	removed := sortedEndpoints(old.endpoints, func(e endpoint) bool {
		_, still := cur.endpoints[e.addr]
		return !still
	})
	if len(removed) > 0 {
		addrs := make([]*pb.WeightedAddr, len(removed))
		for i, e := range removed {
			addrs[i] = &pb.WeightedAddr{Addr: tcpAddress(e.addr)}
		}
		out = append(out, &pb.Update{Update: &pb.Update_Remove{Remove: &pb.AddrSet{Addrs: addrs, MetricLabels: old.setLabels}}})
	}
	added := sortedEndpoints(cur.endpoints, func(e endpoint) bool {
		was, ok := old.endpoints[e.addr]
		return !ok || !was.equal(e)
	})
	if len(added) > 0 {
		out = append(out, addUpdate(cur.setLabels, added))
	}
	if len(cur.endpoints) == 0 && (len(old.endpoints) > 0 || old.exists != cur.exists) {
		out = append(out, noEndpoints(cur.exists))
	}
	return out
}

// sortedEndpoints returns the endpoints of m that keep accepts (all when
// keep is nil), ordered by address so that messages are deterministic.
func sortedEndpoints(m map[netip.AddrPort]endpoint, keep func(endpoint) bool) []endpoint {
	var out []endpoint
	for _, e := range m {
		if keep == nil || keep(e) {
			out = append(out, e)
		}
	}
	slices.SortFunc(out, func(a, b endpoint) int { return a.addr.Compare(b.addr) })
	return out
}

func addUpdate(setLabels map[string]string, eps []endpoint) *pb.Update {
	addrs := make([]*pb.WeightedAddr, len(eps))
	for i, e := range eps {
		wa := &pb.WeightedAddr{Addr: tcpAddress(e.addr), Weight: Weight, MetricLabels: e.labels, ProtocolHint: &pb.ProtocolHint{}, Terminating: e.terminating}
		if e.identity != "" {
			wa.TlsIdentity = &pb.TlsIdentity{SpiffeId: e.identity}
		}
		if e.opaque {
			wa.ProtocolHint.Protocol = pb.ProtocolHint_OPAQUE
		}
		if e.via.IsValid() {
			wa.Via = tcpAddress(e.via)
		}
		addrs[i] = wa
	}
	return &pb.Update{Update: &pb.Update_Add{Add: &pb.AddrSet{Addrs: addrs, MetricLabels: setLabels}}}
}

func noEndpoints(exists bool) *pb.Update {
	return &pb.Update{Update: &pb.Update_NoEndpoints{NoEndpoints: &pb.NoEndpoints{Exists: exists}}}
}

func tcpAddress(ap netip.AddrPort) *pb.TcpAddress {
	return &pb.TcpAddress{Ip: ap.Addr().AsSlice(), Port: uint32(ap.Port())}
}

func profileMessage(p profile) *pb.DestinationProfile {
	return &pb.DestinationProfile{FullyQualifiedName: p.fqn, OpaqueProtocol: p.opaque}
}

// updateKind names an Update for the updates metric.
func updateKind(u *pb.Update) string {
	switch u.Update.(type) {
	case *pb.Update_Add:
		return "add"
	case *pb.Update_Remove:
		return "remove"
	default:
		return "no_endpoints"
	}
}
