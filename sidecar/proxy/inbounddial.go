package proxy

import (
	"context"
	"net"
	"net/netip"

	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/sidecar/sockio"
)

// dialFunc opens one upstream connection.
type dialFunc = func(ctx context.Context, dst netip.AddrPort) (net.Conn, error)

// dialer is the dial of one direction's upstream connections: the inbound
// side's go to the application, from the inbound source.
func (p *Proxy) dialer(dir string) dialFunc {
	if dir == metrics.Inbound {
		return p.opts.DialInbound
	}
	return p.opts.Dial
}

// inboundDial is the inbound side's dial for opts whose Dial is already
// set: DialInbound if given, else one bound to Config.InboundSource, else
// Dial.
func inboundDial(opts Options) dialFunc {
	switch {
	case opts.DialInbound != nil:
		return sockioDial(opts.DialInbound)
	case len(opts.Config.InboundSource) > 0:
		return sockioDial(boundDial(opts.Config.InboundSource))
	}
	return opts.Dial
}

// sockioDial wraps the TCP connections dial opens for sockio's copies.
func sockioDial(dial dialFunc) dialFunc {
	return func(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
		c, err := dial(ctx, dst)
		if tc, ok := c.(*net.TCPConn); ok && err == nil {
			return sockio.Wrap(tc), nil
		}
		return c, err
	}
}

// boundDial dials from the source of srcs of the destination's family,
// still to the destination: an application listening only on the pod's
// address is reached as before, and the pod's rules let a connection from
// that source through to it instead of taking it for the proxy calling
// its own pod (a self-call through a Service), which goes to the inbound
// side and would loop. The application sees the source as its peer.
// Destinations on loopback, where no such rule applies, and families
// without a source are dialled unbound.
func boundDial(srcs []netip.Addr) dialFunc {
	var plain net.Dialer
	var v4, v6 *net.Dialer
	for _, a := range srcs {
		d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: a.AsSlice()}, Control: bindAddressNoPort}
		if a.Is4() {
			v4 = d
		} else {
			v6 = d
		}
	}
	return func(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
		a := dst.Addr().Unmap()
		d := &plain
		switch {
		case a.IsLoopback():
		case a.Is4() && v4 != nil:
			d = v4
		case a.Is6() && v6 != nil:
			d = v6
		}
		return d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, dst.Port()).String())
	}
}
