package discovery

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
)

// Outbound policies: which routes apply to requests to one Service port,
// streamed by destination's GetOutboundPolicy and compiled once per
// update. A destination destination does not know, or a policy not yet
// (or never) received, gets the default route: the original destination
// as today.

// Policy returns the compiled routes of dst, subscribing on first use
// (waiting up to FirstTimeout, or ctx, for the first answer).
func (r *Resolver) Policy(ctx context.Context, dst netip.AddrPort) *routes.Table {
	s := r.policySub(dst)
	s.used.Store(true)
	if t := s.table.Load(); t != nil {
		return t
	}
	waitFirst(ctx, s.first, r.opts.FirstTimeout)
	if t := s.table.Load(); t != nil {
		return t
	}
	return r.defaultTable
}

// policySub returns dst's policy subscription, starting it if needed.
func (r *Resolver) policySub(dst netip.AddrPort) *policySub {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.policies[dst]; ok {
		return s
	}
	ctx, cancel := context.WithCancel(r.ctx)
	s := &policySub{dst: dst, first: make(chan struct{}), cancel: cancel, seen: time.Now().UnixNano()}
	r.policies[dst] = s
	go r.followPolicy(ctx, s)
	// The request will want dst's endpoints next (most backends are the
	// Service itself): ask for both at once, not one after the other.
	r.subscriptionLocked(subKey{addr: dst})
	return s
}

// policySub is the cached policy of one destination.
type policySub struct {
	dst    netip.AddrPort
	cancel context.CancelFunc
	first  chan struct{} // closed after the first message or failed stream
	once   sync.Once
	// used is set by every Policy call (no clock read per request); the
	// janitor turns it into seen, the last time it found it set.
	used  atomic.Bool
	seen  int64 // unix nanos; the janitor's (under r.mu)
	table atomic.Pointer[routes.Table]
}

func (s *policySub) firstDone() { s.once.Do(func() { close(s.first) }) }

// followPolicy keeps a GetOutboundPolicy stream open for s until ctx ends;
// the last policy stays in use while the control plane is away.
func (r *Resolver) followPolicy(ctx context.Context, s *policySub) {
	r.keepStream(ctx, func(ctx context.Context) (bool, error) { return r.streamPolicy(ctx, s) }, func(err error, retryIn time.Duration) {
		s.firstDone()
		r.opts.Log.Warn("outbound policy stream ended; keeping the cached policy and reconnecting", "dst", s.dst, "retry_in", retryIn, "err", err)
	})
}

func (r *Resolver) streamPolicy(ctx context.Context, s *policySub) (got bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := r.opts.Client.GetOutboundPolicy(sctx, &destinationpb.GetDestination{Path: s.dst.String(), ContextToken: r.opts.ContextToken})
	if err != nil {
		return false, fmt.Errorf("outbound policy %s: %w", s.dst, err)
	}
	for {
		p, err := st.Recv()
		if err != nil {
			return got, fmt.Errorf("outbound policy %s: %w", s.dst, err)
		}
		got = true
		r.release(s.table.Swap(r.compile(s.dst, p)))
		if ctx.Err() != nil {
			// Dropped while compiling: dropIdlePolicies may have swapped
			// nil in before our table, which nobody would release.
			r.release(s.table.Swap(nil))
		}
		s.firstDone()
	}
}

// compile turns a received policy into a table, keeping the rules that
// compile (the control plane validated them; a proxy of another version
// may still disagree) and logging the others.
func (r *Resolver) compile(dst netip.AddrPort, p *destinationpb.OutboundPolicy) *routes.Table {
	if p.GetParent() == nil {
		return r.defaultTable // not a Service: its original destination
	}
	t, err := routes.Compile(p)
	if err != nil {
		r.opts.Log.Warn("outbound policy has rules this proxy cannot use; they are left out", "dst", dst, "err", err)
	}
	if r.opts.Instrument != nil {
		r.opts.Instrument(t)
	}
	return t
}

// dropIdlePolicies ends policy subscriptions unused for IdleTimeout; r.mu
// is held.
func (r *Resolver) dropIdlePolicies(now int64) {
	for dst, s := range r.policies {
		if s.used.Swap(false) {
			s.seen = now
		}
		if time.Duration(now-s.seen) > r.opts.IdleTimeout {
			s.cancel()
			delete(r.policies, dst)
			r.release(s.table.Swap(nil))
		}
	}
}

// release tells Options.Release that t serves no new requests.
func (r *Resolver) release(t *routes.Table) {
	if t != nil && t != r.defaultTable && r.opts.Release != nil {
		r.opts.Release(t)
	}
}
