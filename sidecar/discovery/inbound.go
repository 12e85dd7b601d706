package discovery

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/authz"
)

// Inbound policies: who may connect to each port of the proxy's own pod,
// streamed by destination's GetInboundPolicy and compiled once per
// update. The last policy stays in force while the control plane is
// away; a port that never had one has none (the proxy fails closed).

// InboundPolicy returns the compiled policy of port, subscribing on first
// use (waiting up to FirstTimeout, or ctx, for the first answer); nil
// while destination has never answered for it.
func (r *Resolver) InboundPolicy(ctx context.Context, port uint16) *authz.Policy {
	s := r.inboundSub(port)
	if p := s.policy.Load(); p != nil {
		return p
	}
	waitFirst(ctx, s.first, r.opts.FirstTimeout)
	return s.policy.Load()
}

// WatchInbound subscribes to the policies of ports at once (the pod's
// declared ports: /ready waits for them).
func (r *Resolver) WatchInbound(ports []uint16) {
	for _, p := range ports {
		r.inboundSub(p).watched.Store(true)
	}
}

// InboundReady returns nil once every port WatchInbound named has had a
// policy, else an error naming those that have not. Ports subscribed to
// because a client tried them do not count: a stray connection must not
// take the pod out of its Services.
func (r *Resolver) InboundReady() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var waiting []uint16
	for port, s := range r.inbound {
		if s.watched.Load() && s.policy.Load() == nil {
			waiting = append(waiting, port)
		}
	}
	if len(waiting) > 0 {
		return fmt.Errorf("no inbound policy yet from the control plane for ports %v: denying all but probes there (fail closed)", waiting)
	}
	return nil
}

// MaxInboundPorts bounds the ports with an inbound policy subscription
// (each is a stream to the control plane): a client trying many ports
// cannot make the proxy open a stream per port. Beyond it, a port has no
// policy: denied.
const MaxInboundPorts = 64

// inboundSub returns port's subscription, starting it if needed. Inbound
// subscriptions last as long as the proxy: a pod has few ports.
func (r *Resolver) inboundSub(port uint16) *inboundSub {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.inbound[port]; ok {
		return s
	}
	s := &inboundSub{port: port, first: make(chan struct{})}
	if len(r.inbound) >= MaxInboundPorts {
		s.firstDone() // never subscribed: no policy, denied
		if !r.inboundFull {
			r.inboundFull = true
			r.opts.Log.Warn("inbound policy subscriptions at their limit; connections to further ports are denied", "limit", MaxInboundPorts, "port", port)
		}
		return s
	}
	r.inbound[port] = s
	go r.followInbound(r.ctx, s)
	return s
}

// inboundSub is the cached inbound policy of one port.
type inboundSub struct {
	port    uint16
	first   chan struct{} // closed after the first message or failed stream
	once    sync.Once
	policy  atomic.Pointer[authz.Policy]
	watched atomic.Bool // named by WatchInbound: /ready waits for it
}

func (s *inboundSub) firstDone() { s.once.Do(func() { close(s.first) }) }

func (r *Resolver) followInbound(ctx context.Context, s *inboundSub) {
	r.keepStream(ctx, func(ctx context.Context) (bool, error) { return r.streamInbound(ctx, s) }, func(err error, retryIn time.Duration) {
		s.firstDone()
		r.opts.Log.Warn("inbound policy stream ended; keeping the last policy and reconnecting", "port", s.port, "retry_in", retryIn, "err", err)
	})
}

func (r *Resolver) streamInbound(ctx context.Context, s *inboundSub) (got bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req := &destinationpb.InboundPolicyRequest{Namespace: r.opts.PodNamespace, Pod: r.opts.PodName, Port: uint32(s.port)}
	st, err := r.opts.Client.GetInboundPolicy(sctx, req)
	if err != nil {
		return false, fmt.Errorf("inbound policy of port %d: %w", s.port, err)
	}
	for {
		p, err := st.Recv()
		if err != nil {
			return got, fmt.Errorf("inbound policy of port %d: %w", s.port, err)
		}
		got = true
		compiled, err := authz.Compile(p)
		if err != nil {
			r.opts.Log.Warn("inbound policy has authorizations this proxy cannot use; they are left out (denying what they would allow)", "port", s.port, "err", err)
		}
		s.policy.Store(compiled)
		s.firstDone()
		if r.opts.InboundChanged != nil {
			r.opts.InboundChanged(s.port, compiled)
		}
	}
}
