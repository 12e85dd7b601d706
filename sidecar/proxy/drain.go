package proxy

import (
	"context"
	"net"
	"sync"
)

// track and untrack keep the connections Shutdown must cut when its
// grace period ends: accepted ones not yet owned by an HTTP server, and
// opaque upstreams.
func (p *Proxy) track(cs ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return false
	}
	for _, c := range cs {
		p.conns[c] = struct{}{}
	}
	return true
}

func (p *Proxy) untrack(cs ...net.Conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range cs {
		delete(p.conns, c)
	}
}

// Shutdown stops accepting, lets in-flight HTTP requests and opaque
// connections finish until ctx ends, then closes whatever remains
// (including connections still in protocol detection). It
// returns ctx.Err() if it had to cut connections.
func (p *Proxy) Shutdown(ctx context.Context) error {
	p.mu.Lock()
	p.closing = true
	for ln := range p.listeners {
		ln.Close()
	}
	p.mu.Unlock()

	var wg sync.WaitGroup
	for _, d := range p.servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var fast sync.WaitGroup
			if d.proxy != nil {
				fast.Go(func() { d.proxy.Shutdown(ctx) })
			}
			if err := d.server.Shutdown(ctx); err != nil {
				d.server.Close()
			}
			<-d.done
			fast.Wait()
			if d.proxy != nil {
				d.proxy.CloseIdle()
			}
		}()
	}
	drained := make(chan struct{})
	go func() {
		p.handlers.Wait()
		wg.Wait()
		close(drained)
	}()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	<-drained
	return ctx.Err()
}
