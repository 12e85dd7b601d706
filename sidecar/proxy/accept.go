package proxy

import (
	"context"
	"net"
	"net/netip"
	"sync"

	"github.com/plexus-mesh/plexus/mesh/connlimit"
	"github.com/plexus-mesh/plexus/sidecar/detect"
	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/sidecar/sockio"
)

// accepted is one accepted connection on its way to a forwarder or an
// HTTP server: the socket, what is read and written (the socket, then
// its TLS session), what was learnt of it, and the release of its slots.
type accepted struct {
	sock    *net.TCPConn // tracked (Shutdown closes it); closing conn closes it
	conn    net.Conn
	dir     string
	dst     netip.AddrPort
	tls     metrics.TLS
	opaque  bool   // forwarded as bytes, never read as HTTP
	release func() // its slots; the HTTP server calls it once it has the connection
}

// handle recovers the destination, detects the protocol and dispatches:
// the connection is refused, forwarded as bytes, served by the HTTP/1
// fast path or handed to the HTTP server. release gives back the
// connection's slots once it is closed.
func (p *Proxy) handle(c *net.TCPConn, dir string, release func()) {
	m, log := p.opts.Metrics, p.opts.Log
	a := &accepted{sock: c, dir: dir, release: release}
	handed := false // to the HTTP server, which releases on close
	defer func() {
		if !handed {
			a.release()
		}
	}()
	// Tracked until handed to the HTTP server, so Shutdown can cut
	// connections still in detection or opaque forwarding.
	if !p.track(c) {
		c.Close()
		return
	}
	defer p.untrack(c)
	dst, err := p.opts.OrigDst(c)
	if err != nil {
		log.Debug("no original destination", "direction", dir, "src", c.RemoteAddr(), "err", err)
		c.Close()
		return
	}
	if local, ok := netip.AddrFromSlice(c.LocalAddr().(*net.TCPAddr).IP); ok &&
		netip.AddrPortFrom(local.Unmap(), uint16(c.LocalAddr().(*net.TCPAddr).Port)) == netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port()) {
		// Not redirected: a client dialled the proxy port itself. Forwarding
		// would connect back to us forever.
		log.Debug("refusing connection addressed to the proxy itself", "direction", dir, "src", c.RemoteAddr())
		c.Close()
		return
	}
	if dir == metrics.Inbound && !p.opts.IsLocal(dst.Addr()) {
		// Redirected to us but addressed elsewhere: forwarding it would
		// make the proxy a relay to anywhere the pod can reach.
		m.Refused(metrics.RefusedNotLocal)
		log.Info("refused inbound connection: its destination is not one of the pod's addresses", "dst", dst, "src", c.RemoteAddr())
		c.Close()
		return
	}
	a.dst, a.conn = dst, sockio.Wrap(c)
	if p.probe != nil && dir == metrics.Inbound && dst.Port() == p.opts.Config.RedirectProbePort {
		p.probed.Store(true)
		m.RedirectProbe()
		probeRelease, ok := p.probeLimit.Take(connlimit.RemoteAddr(c))
		if !ok {
			m.LimitExceeded(limitProbe, metrics.LimitConnections)
			connlimit.ResetClose(c)
			return
		}
		// The probe server closes it, giving back both its slots.
		pc := &httpConn{Conn: a.conn, dst: dst, release: sync.OnceFunc(func() { probeRelease(); release() })}
		if !p.probe.ln.push(pc) {
			pc.Close()
			return
		}
		handed = true
		return
	}
	target := m.Target(dir, dst)
	a.opaque = p.opts.Config.OpaquePorts.Has(dst.Port())
	if !p.inboundTLS(a) {
		return
	}
	if dir == metrics.Inbound && p.opts.Inbound != nil && !p.admitInbound(a) {
		return
	}
	src := m.TrackConn(a.conn, dir, target, metrics.PeerSrc, a.tls)
	// Outbound, the endpoint's protocol hint may make the port opaque.
	if a.opaque || dir == metrics.Outbound && p.opts.Resolver != nil && p.opts.Resolver.Opaque(context.Background(), dst) {
		p.forwardOpaque(src, src, dir, dst, target)
		return
	}
	proto, dc, err := p.detector.Detect(src)
	if err != nil {
		log.Debug("detection failed", "direction", dir, "dst", dst, "err", err)
		src.Fail()
		src.Close()
		return
	}
	if proto == detect.Opaque {
		// Not HTTP after all (or silent past the detect timeout): it
		// carries no request the pipeline could authorize, so the
		// connection is authorized now, as an opaque one.
		if dir == metrics.Inbound && p.opts.Inbound != nil {
			p.inbound.markOpaque(c)
			if !p.authorizeConn(dst, remoteIP(c), a.tls) {
				src.Close()
				return
			}
		}
		p.forwardOpaque(dc, src, dir, dst, target)
		return
	}
	srv := p.dirs[dir]
	var hc net.Conn = dc
	if proto == detect.HTTP1 {
		// The fast path; a request it does not handle comes back with
		// the rest of the connection, for the server.
		if hc = srv.proxy.ServeHTTP1(httpproxy.ClientConn{Conn: dc, Raw: rawConn(c), Dst: dst, TLS: a.tls}); hc == nil {
			return
		}
	}
	if !srv.ln.push(&httpConn{Conn: hc, dst: dst, tls: a.tls, release: a.release}) {
		hc.Close() // shutting down
		return
	}
	handed = true
}
