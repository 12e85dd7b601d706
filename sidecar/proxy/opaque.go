package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/plexus-mesh/plexus/mesh/passthrough"
	"github.com/plexus-mesh/plexus/sidecar/discovery"
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
	var up net.Conn
	var addr netip.AddrPort
	var tl metrics.TLS
	var err error
	if dir == metrics.Outbound && p.opts.Resolver != nil {
		var pk discovery.Pick
		pk, up, tl, err = p.dialPicked(ctx, dst)
		defer pk.Done() // pending for the connection's life (least-loaded)
		addr = pk.Addr
	} else {
		addr = dst
		up, err = p.dialer(dir)(ctx, addr)
	}
	cancel()
	if err != nil {
		if errors.Is(err, errNoEndpoint) {
			p.opts.Log.Info("opaque connection failed: no endpoint", "dst", dst, "err", err)
		} else {
			p.opts.Log.Debug("opaque connect failed", "direction", dir, "dst", dst, "endpoint", addr, "err", err)
		}
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

// Opaque connect attempts: an outbound opaque connection whose endpoint
// refuses it, or does not accept it within connectAttemptTimeout, is
// tried on another endpoint, up to connectAttempts in all within
// ConnectTimeout. Nothing was sent yet, so a retry is safe; the endpoint
// is marked down (discovery.Pick.ConnectFailed) and probed, so that the
// connections after it do not try it.
const (
	connectAttempts       = 3
	connectAttemptTimeout = time.Second
)

// errNoEndpoint: the resolver had no endpoint for the connection.
var errNoEndpoint = errors.New("no endpoint")

// dialPicked opens an outbound opaque connection for dst to an endpoint
// the resolver picks, over mesh mTLS when it has an identity, trying
// another endpoint when one cannot be reached (above). It returns the
// pick, to be Done when the connection ends (also on an error), the
// connection and its TLS, or the last error.
func (p *Proxy) dialPicked(ctx context.Context, dst netip.AddrPort) (discovery.Pick, net.Conn, metrics.TLS, error) {
	var pk discovery.Pick
	var err error
	for attempt := 1; ; attempt++ {
		pk, err = p.opts.Resolver.PickConn(ctx, dst)
		if err != nil {
			return discovery.Pick{Endpoint: discovery.Endpoint{Addr: dst}}, nil, metrics.TLS{}, fmt.Errorf("%w: %w", errNoEndpoint, err)
		}
		last := attempt == connectAttempts || pk.Fallback
		actx, cancel := ctx, context.CancelFunc(func() {})
		if !last {
			actx, cancel = context.WithTimeout(ctx, connectAttemptTimeout)
		}
		up, derr := passthrough.Dial(actx, p.dialer(metrics.Outbound), pk.Via, pk.Addr)
		cancel()
		if derr == nil {
			id := pk.Identity
			if p.opts.Certs == nil || id.IsZero() {
				return pk, up, metrics.TLS{}, nil
			}
			up, err = p.secure(ctx, up, id)
			return pk, up, metrics.TLS{On: true, PeerID: p.opts.Metrics.PeerID(metrics.Outbound, id)}, err
		}
		if ctx.Err() != nil {
			// The connection's own deadline, spent waiting for an
			// endpoint or on earlier attempts: no sign of this one.
			return pk, nil, metrics.TLS{}, derr
		}
		pk.ConnectFailed()
		if last {
			return pk, nil, metrics.TLS{}, derr
		}
		pk.Done()
	}
}
