package destination

import (
	"sync"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// publisher holds the current snapshot of one service port (or pod IP
// port) and the streams that follow it. update recomputes the snapshot and
// pushes the difference to every stream; pushes never block.
type publisher struct {
	compute func() snapshot

	mu       sync.Mutex
	computed bool
	cur      snapshot
	gets     map[*translator[*pb.Update]]struct{}
	profiles map[*translator[*pb.DestinationProfile]]struct{}
}

func newPublisher(compute func() snapshot) *publisher {
	return &publisher{
		compute:  compute,
		gets:     map[*translator[*pb.Update]]struct{}{},
		profiles: map[*translator[*pb.DestinationProfile]]struct{}{},
	}
}

// ensure computes the first snapshot. Callers hold p.mu.
func (p *publisher) ensure() {
	if !p.computed {
		p.cur = p.compute()
		p.computed = true
	}
}

// subscribeGet adds t and queues the current state as its first messages.
func (p *publisher) subscribeGet(t *translator[*pb.Update]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ensure()
	p.gets[t] = struct{}{}
	t.push(initialUpdates(&p.cur)...)
}

// subscribeProfile adds t and queues the current profile.
func (p *publisher) subscribeProfile(t *translator[*pb.DestinationProfile]) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ensure()
	p.profiles[t] = struct{}{}
	t.push(profileMessage(p.cur.profile))
}

// unsubscribe removes a stream's translator (either kind; the other is
// nil) and reports whether the publisher has no streams left. Callers hold
// the watcher's lock so that an empty publisher is dropped atomically.
func (p *publisher) unsubscribe(get *translator[*pb.Update], prof *translator[*pb.DestinationProfile]) (empty bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.gets, get)
	delete(p.profiles, prof)
	return len(p.gets) == 0 && len(p.profiles) == 0
}

// update recomputes the snapshot and pushes what changed. The messages are
// built once and shared by all streams (they are never mutated after).
func (p *publisher) update() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.computed {
		return // nobody has subscribed yet; the first subscriber computes
	}
	cur := p.compute()
	old := p.cur
	p.cur = cur
	if len(p.gets) > 0 {
		if msgs := diffUpdates(&old, &cur); len(msgs) > 0 {
			for t := range p.gets {
				t.push(msgs...)
			}
		}
	}
	if len(p.profiles) > 0 && old.profile != cur.profile {
		msg := profileMessage(cur.profile)
		for t := range p.profiles {
			t.push(msg)
		}
	}
}
