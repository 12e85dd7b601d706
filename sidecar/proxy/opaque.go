package proxy

import (
	"context"
	"net"
	"net/netip"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/sidecar/forward"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// forwardOpaque dials dst (outbound with a resolver: an endpoint picked
// for this connection, over mesh mTLS when it has an identity; inbound:
// from the inbound source) and joins it with src, whose metrics are mc.
func (p *Proxy) forwardOpaque(src net.Conn, mc *metrics.Conn, dir string, dst netip.AddrPort, target string) {
	m := p.opts.Metrics
	ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
	defer cancel()
	addr, id := dst, spiffe.ID{}
	if dir == metrics.Outbound && p.opts.Resolver != nil {
		pk, err := p.opts.Resolver.PickConn(ctx, dst)
		if err != nil {
			p.opts.Log.Info("opaque connection failed: no endpoint", "dst", dst, "err", err)
			mc.Fail()
			src.Close()
			return
		}
		defer pk.Done()
		addr = pk.Addr
		if p.opts.Certs != nil {
			id = pk.Identity
		}
	}
	up, err := p.dialer(dir)(ctx, addr)
	var tl metrics.TLS
	if err == nil && !id.IsZero() {
		up, err = p.secure(ctx, up, id)
		tl = metrics.TLS{On: true, PeerID: m.PeerID(dir, id)}
	}
	cancel()
	if err != nil {
		p.opts.Log.Debug("opaque connect failed", "direction", dir, "dst", dst, "endpoint", addr, "err", err)
		mc.Fail()
		src.Close()
		return
	}
	if addr != dst {
		target = m.Target(dir, addr)
	}
	upm := m.TrackConn(up, dir, target, metrics.PeerDst, tl)
	if !p.track(upm) {
		src.Close()
		upm.Close()
		return
	}
	defer p.untrack(upm)
	if _, err := p.joiner.Join(failable{src, mc}, upm, forward.Counts{}); err != nil {
		p.opts.Log.Debug("opaque connection ended", "direction", dir, "dst", dst, "err", err)
	}
}

// failable lets the joiner mark the accepted connection's metrics failed
// through the detection wrapper.
type failable struct {
	net.Conn
	mc *metrics.Conn
}

func (f failable) Fail() { f.mc.Fail() }

// CloseWrite half-closes, or closes what cannot half-close.
func (f failable) CloseWrite() error {
	if cw, ok := f.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return f.Conn.Close()
}
