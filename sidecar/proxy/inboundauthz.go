package proxy

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/plexus-mesh/plexus/mesh/policy/authz"
	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// Inbound authorization (ARCHITECTURE.md §9): each port's policy comes from
// destination (InboundPolicies). A connection the proxy cannot see HTTP
// in is authorized once; an HTTP request, each time, in the pipeline's
// authorize stage. A port with no policy yet is denied (fail closed). A
// policy change closes the live connections of clients it no longer lets
// in.

// InboundPolicies gives the inbound policy of each port of the pod
// (discovery.Resolver).
type InboundPolicies interface {
	// InboundPolicy returns port's policy; nil when there is none yet.
	InboundPolicy(ctx context.Context, port uint16) *authz.Policy
}

// denied is the decision for a port without a policy.
var denied = authz.Decision{Denied: true}

// inboundPolicy returns port's policy; enforce is false when no inbound
// policies apply at all (no control plane: every client allowed).
func (p *Proxy) inboundPolicy(port uint16) (pol *authz.Policy, enforce bool) {
	if p.opts.Inbound == nil {
		return nil, false
	}
	return p.opts.Inbound.InboundPolicy(context.Background(), port), true
}

// admitInbound runs the connection-level check of an inbound connection:
// a connection the proxy will not parse HTTP on (opaque, or a Server
// whose protocol is opaque or TLS) is authorized now, and refused
// (closed: false) when denied; every admitted one is watched for
// revocation until it is released.
func (p *Proxy) admitInbound(a *accepted) bool {
	pol, _ := p.inboundPolicy(a.dst.Port())
	if pol != nil && (pol.Protocol == "opaque" || pol.Protocol == "TLS") {
		a.opaque = true
	}
	client := remoteIP(a.sock)
	// Watched before it is authorized: a policy change between the two
	// is then either seen by the check or revokes the connection.
	forget := p.inbound.watch(a.sock, inboundConn{port: a.dst.Port(), client: authz.Client{Addr: client, ID: a.tls.ID}, tls: a.tls, opaque: a.opaque})
	if a.opaque && !p.authorizeConn(a.dst, client, a.tls) {
		forget()
		a.conn.Close()
		return false
	}
	release := a.release
	a.release = func() { forget(); release() }
	return true
}

// remoteIP is c's peer address, or the zero Addr.
func remoteIP(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// authorizeRequest is the HTTP pipeline's authorize stage (inbound).
func (p *Proxy) authorizeRequest(req *httpproxy.Request) authz.Decision {
	pol, enforce := p.inboundPolicy(req.Dst.Port())
	if !enforce {
		return authz.Decision{Allowed: true}
	}
	d := denied
	if pol != nil {
		c := authz.Client{Addr: req.Client, ID: req.TLS.ID}
		rq := req.Route()
		d = pol.Request(&c, &rq)
	}
	if d.NoRoute {
		return d // answered 404 route-not-found; counted in response_total
	}
	p.opts.Metrics.HTTPAuthz(p.authzResult(pol, d, req.Dst.Port(), req.TLS))
	if d.Denied {
		p.logDenial(d, "request", req.Dst, req.Client, req.TLS, req.Method+" "+req.Path)
	}
	if d.Allowed && pol != nil && pol.RateLimit != nil && !authz.IsProbeRoute(d.Route) && !pol.Admit(&authz.Client{Addr: req.Client, ID: req.TLS.ID}, monoNow()) {
		// The kubelet's probes are never rate-limited: a limit reached
		// under load would take the pod out of its Service.
		d.RateLimited = true
		p.opts.Metrics.RateLimited(metrics.AuthzResult{Server: pol.Server, Authz: pol.RateLimit.GetRef(), Port: req.Dst.Port(), TLS: req.TLS})
	}
	return d
}

// authorizeConn authorizes a connection whose HTTP the proxy does not
// see; false: refuse it.
func (p *Proxy) authorizeConn(dst netip.AddrPort, client netip.Addr, tl metrics.TLS) bool {
	pol, enforce := p.inboundPolicy(dst.Port())
	if !enforce {
		return true
	}
	d := denied
	if pol != nil {
		d = pol.Connection(&authz.Client{Addr: client, ID: tl.ID})
	}
	p.opts.Metrics.TCPAuthz(p.authzResult(pol, d, dst.Port(), tl))
	p.logDenial(d, "connection", dst, client, tl, "")
	return d.Allowed
}

func (p *Proxy) authzResult(pol *authz.Policy, d authz.Decision, port uint16, tl metrics.TLS) metrics.AuthzResult {
	r := metrics.AuthzResult{Route: d.Route, Authz: d.Authz, TLS: tl, Allowed: d.Allowed, DryRun: d.DryRun}
	if pol != nil {
		// Without a policy srv_port stays empty: a client trying every
		// port must not make a series per port.
		r.Server, r.Port = pol.Server, port
	}
	return r
}

func (p *Proxy) logDenial(d authz.Decision, what string, dst netip.AddrPort, client netip.Addr, tl metrics.TLS, detail string) {
	if !d.Denied {
		return
	}
	msg := "denied inbound " + what + " (not authorized by the port's policy)"
	if d.DryRun {
		msg = "inbound " + what + " would be denied; allowed (audit or dry run)"
	}
	p.opts.Log.Info(msg, "dst", dst, "client", client, "client_id", tl.ID, "request", detail, "dry_run_by", d.Authz.GetName())
}

// inboundConns are the live inbound connections by port, for revocation.
type inboundConns struct {
	mu    sync.Mutex
	conns map[net.Conn]inboundConn
}

type inboundConn struct {
	port   uint16
	client authz.Client
	tls    metrics.TLS
	opaque bool // authorized as a connection (else per request)
}

// markOpaque records that c turned out to carry no HTTP: a revocation
// checks it as a connection.
func (s *inboundConns) markOpaque(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ic, ok := s.conns[c]; ok {
		ic.opaque = true
		s.conns[c] = ic
	}
}

// watch records c until the returned func is called.
func (s *inboundConns) watch(c net.Conn, ic inboundConn) (forget func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		s.conns = map[net.Conn]inboundConn{}
	}
	s.conns[c] = ic
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.conns, c)
	}
}

// Revoke closes the live connections to port whose clients pol no longer
// lets in (discovery.Options.InboundChanged): an opaque connection its
// Connection decision denies, an HTTP one whose client no authorization
// of the port or its routes admits any more.
func (p *Proxy) Revoke(port uint16, pol *authz.Policy) {
	s := &p.inbound
	s.mu.Lock()
	var cut []net.Conn
	var why []inboundConn
	for c, ic := range s.conns {
		if ic.port != port {
			continue
		}
		ok := pol.MayConnect(&ic.client)
		if ic.opaque {
			ok = pol.Connection(&ic.client).Allowed
		}
		if !ok {
			cut = append(cut, c)
			why = append(why, ic)
		}
	}
	s.mu.Unlock()
	for i, c := range cut {
		c.Close()
		p.opts.Metrics.TCPAuthzTerminated(metrics.AuthzResult{Server: pol.Server, Port: port, TLS: why[i].tls})
		p.opts.Log.Info("closed an inbound connection: the policy no longer lets its client in", "port", port, "client", why[i].client.Addr, "client_id", why[i].client.ID)
	}
}

// monoBase anchors monoNow, the rate limits' monotonic clock.
var monoBase = time.Now()

func monoNow() int64 { return int64(time.Since(monoBase)) }
