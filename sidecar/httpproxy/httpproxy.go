// Package httpproxy forwards HTTP/1.1 and HTTP/2 (h2c, gRPC) requests to
// their original destination over pooled upstream connections.
package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/passthrough"
	"github.com/plexus-mesh/plexus/mesh/policy/authz"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/balance"
	"github.com/plexus-mesh/plexus/sidecar/forward"
	"github.com/plexus-mesh/plexus/sidecar/h2transport"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/sidecar/tap"
)

// ErrorHeader names the response header the proxy sets on responses it
// generates itself, with the reason as its value.
const ErrorHeader = "plexus-proxy-error"

type dstKey struct{}

// WithDestination returns ctx carrying the original destination of the
// connection a request arrived on; ServeHTTP forwards there.
func WithDestination(ctx context.Context, dst netip.AddrPort) context.Context {
	return context.WithValue(ctx, dstKey{}, dst)
}

// Destination returns the destination stored by WithDestination.
func Destination(ctx context.Context) (netip.AddrPort, bool) {
	dst, ok := ctx.Value(dstKey{}).(netip.AddrPort)
	return dst, ok
}

type tlsKey struct{}

// WithTLS returns ctx carrying the mesh TLS of the connection a request
// arrived on (inbound: the verified client identity), for the metrics.
func WithTLS(ctx context.Context, t metrics.TLS) context.Context {
	return context.WithValue(ctx, tlsKey{}, t)
}

// Endpoint is where one request goes.
type Endpoint struct {
	Addr netip.AddrPort
	// Identity is the identity the upstream proxy must prove over mesh
	// mTLS; zero means plaintext.
	Identity spiffe.ID
	// Via is the gateway that reaches Addr (mesh/passthrough); zero: none.
	Via netip.AddrPort
	// Cluster is the linked cluster Addr is in ("" for this one's): the
	// metrics' dst_cluster.
	Cluster string
	// Load, when set, is told of the request's first response byte and
	// its end (the balancer's latency and pending counts).
	Load Load
}

// connected tells e's Load, if any, that the request's new connection is
// up.
func (e Endpoint) connected() {
	if e.Load != nil {
		e.Load.Connected()
	}
}

// connectFailed tells e's Load, if any, when err says that e refused the
// request's connection, was unreachable or did not accept it within the
// connect timeout: not for a handshake that failed on an accepted
// connection, nor when the request's own context ended first.
func (e Endpoint) connectFailed(err error) {
	var de *dialError
	if e.Load != nil && errors.As(err, &de) && de.marksDown {
		e.Load.ConnectFailed()
	}
}

// Load is an endpoint's balancer state for one request.
type Load interface {
	// Connected is called when the request had to wait for a new
	// connection, once it is established (possibly on the dialer's
	// goroutine): the latency counts from there.
	Connected()
	// ConnectFailed is called when the endpoint refused the request's
	// new connection, was unreachable, or did not accept it within the
	// connect timeout: the balancer passes it over until a probe connects
	// (discovery.Pick.ConnectFailed).
	ConnectFailed()
	// FirstByte is called when response headers arrive.
	FirstByte()
	// Done is called once the attempt has finished, with its outcome
	// for failure accrual.
	Done(balance.Outcome)
}

// ErrNoEndpoints is wrapped by a Balance error when the destination exists
// but has no endpoint to send to (answered 503, reason no-endpoints).
var ErrNoEndpoints = errors.New("no ready endpoints")

// ErrQueueFull is wrapped by a Balance error when too many requests
// already wait for an endpoint of the destination (answered 503, reason
// queue-full).
var ErrQueueFull = errors.New("too many requests wait for an endpoint")

type endpointKey struct{}

// Options configure a Proxy.
type Options struct {
	Direction string // metrics.Inbound or metrics.Outbound
	Metrics   *metrics.Metrics
	Log       *slog.Logger
	// Dial opens a TCP connection to the destination (the proxy's own
	// dials must not be redirected again). net.Dialer when nil.
	Dial func(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
	// ConnectTimeout bounds each upstream dial.
	ConnectTimeout time.Duration
	// IdleConnTimeout closes pooled upstream connections idle this long.
	IdleConnTimeout time.Duration
	// IdleTimeout closes an Upgrade (WebSocket) tunnel with no bytes
	// either way for this long, and a response body with no bytes from
	// the upstream for this long.
	IdleTimeout time.Duration
	// MaxIdleConnsPerHost bounds the pool kept for each destination.
	MaxIdleConnsPerHost int
	// IsolateClients keeps each fast-path client's upstream connections
	// to itself instead of pooling them for every client: a response an
	// upstream sends late can then reach no other client connection.
	// The inbound side sets it (the upstream is the application).
	IsolateClients bool
	// Routes returns the outbound routes for requests to dst (the route
	// stage). nil: no routes, every request goes to dst (inbound).
	Routes func(ctx context.Context, dst netip.AddrPort) *routes.Table
	// Authorize decides whether the inbound policy lets the request's
	// client send it (the authorize stage). nil: every request may.
	Authorize func(*Request) authz.Decision
	// Balance chooses the endpoint of each request (outbound load
	// balancing, per request so keep-alive clients spread too): among
	// backend's endpoints, or dst's when backend is nil or names no
	// authority. nil: the original destination, plaintext.
	Balance func(ctx context.Context, dst netip.AddrPort, backend *routes.Backend) (Endpoint, error)
	// BackendUnavailable reports whether a route backend is known to have
	// no endpoint to take a request now (destination answered it with
	// none: scaled to 0, a linked cluster withdrawn; or every one is
	// marked down); a rule's pick then fails over to its other backends
	// that have one. nil: never.
	BackendUnavailable func(*routes.Backend) bool
	// Tap is the proxy's tap sessions (the observe stage); nil: no tap.
	Tap *tap.Hub
	// Secure runs the mesh mTLS client handshake on a dialled upstream
	// connection that must prove id. Needed when Balance returns identities.
	Secure func(ctx context.Context, c net.Conn, id spiffe.ID) (net.Conn, error)
	// ReadHeaderTimeout bounds how long an HTTP/1 client on the fast path
	// may take to send a request head once it started (slowloris).
	ReadHeaderTimeout time.Duration
	// ClientIdleTimeout closes a fast-path client connection that sends
	// no new request for this long.
	ClientIdleTimeout time.Duration
	// BodyIdleTimeout bounds how long a request body may make no
	// progress (answered 408 and both connections closed). 0: no limit.
	BodyIdleTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for response headers after
	// the request was sent (504), except for gRPC. 0: no limit.
	ResponseHeaderTimeout time.Duration
	// WriteTimeout bounds how long a write to a client or an upstream may
	// make no progress (a peer that stopped reading). 0: no limit.
	WriteTimeout time.Duration
	// MaxInformational bounds the interim (1xx) responses relayed for one
	// request; one more is answered 502.
	MaxInformational int
}

// Proxy is an http.Handler that forwards each request to the destination
// in its context. HTTP/1 requests go upstream as HTTP/1.1, HTTP/2
// requests as HTTP/2 with prior knowledge, each over its own pool.
type Proxy struct {
	opts Options
	h1   *http.Transport
	h2   *h2transport.Transport
	// Upstreams over mesh mTLS have their own pools, so a request that
	// must be encrypted never reuses a plaintext connection to the same
	// address.
	h1TLS *http.Transport
	h2TLS *h2transport.Transport
	bufs  sync.Pool
	tun   *forward.Joiner
	// The HTTP/1.1 fast path (ServeHTTP1): its upstream pool (plaintext
	// and mesh mTLS connections keyed apart) and its client connections.
	h1pool  h1pool
	h1conns h1conns
}

// New returns a Proxy.
func New(opts Options) *Proxy {
	if opts.Dial == nil {
		d := &net.Dialer{}
		opts.Dial = func(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", dst.String())
		}
	}
	p := &Proxy{
		opts: opts,
		bufs: sync.Pool{New: func() any { return new([32 << 10]byte) }},
		tun:  forward.New(opts.IdleTimeout),
	}
	p.h1pool.max, p.h1pool.timeout = opts.MaxIdleConnsPerHost, opts.IdleConnTimeout
	mk := func(dial func(context.Context, string, string) (net.Conn, error)) *http.Transport {
		t := &http.Transport{
			Proxy:                  nil, // never honour HTTP_PROXY: we are the proxy
			DialContext:            dial,
			MaxIdleConns:           0,
			MaxIdleConnsPerHost:    opts.MaxIdleConnsPerHost,
			IdleConnTimeout:        opts.IdleConnTimeout,
			DisableCompression:     true,
			MaxResponseHeaderBytes: maxResponseHeaderBytes,
			Protocols:              new(http.Protocols),
		}
		t.Protocols.SetHTTP1(true)
		return t
	}
	mk2 := func(dial func(context.Context, string, string) (net.Conn, error)) *h2transport.Transport {
		return &h2transport.Transport{Dial: dial, IdleConnTimeout: opts.IdleConnTimeout,
			MaxResponseHeaderBytes: maxResponseHeaderBytes, WriteTimeout: opts.WriteTimeout}
	}
	p.h1, p.h2 = mk(p.dial), mk2(p.dial)
	p.h1TLS, p.h2TLS = mk(p.dialTLS), mk2(p.dialTLS)
	return p
}

// maxResponseHeaderBytes bounds an upstream response's header block.
const maxResponseHeaderBytes = 64 << 10

// CloseIdle closes pooled upstream connections that are idle.
func (p *Proxy) CloseIdle() {
	p.h1.CloseIdleConnections()
	p.h1TLS.CloseIdleConnections()
	p.h2.CloseIdleConnections()
	p.h2TLS.CloseIdleConnections()
	p.h1pool.closeIdle()
}

// CloseIdleTo closes the idle upstream connections to addrs, endpoints
// that discovery removed: the fast path's and HTTP/2's exactly;
// net/http's pool (the HTTP/1 hand-offs) cannot close per address, so
// all its idle connections go (removals come with rollouts and scaling,
// not per request).
func (p *Proxy) CloseIdleTo(addrs []netip.AddrPort) {
	p.h1pool.closeIdleTo(addrs)
	p.h2.CloseIdleTo(addrs)
	p.h2TLS.CloseIdleTo(addrs)
	p.h1.CloseIdleConnections()
	p.h1TLS.CloseIdleConnections()
}

// remoteAddr is c's peer address, or the zero Addr.
func remoteAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}

// dialError marks an error from connecting upstream. marksDown says the
// endpoint refused the connection, was unreachable, or did not accept it
// within the connect timeout while the request still waited: the
// balancer should pass it over until a probe connects.
type dialError struct {
	err       error
	marksDown bool
}

func (e *dialError) Error() string { return "connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// tlsError marks a failed mesh mTLS handshake with the upstream proxy.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

func (p *Proxy) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	ep, ok := ctx.Value(endpointKey{}).(Endpoint)
	ok = ok && ep.Addr.String() == addr
	var via netip.AddrPort
	if ok {
		via = ep.Via
	}
	d, err := p.connect(ctx, addr, spiffe.ID{}, via)
	if ok {
		if err != nil {
			ep.connectFailed(err)
		} else {
			ep.connected()
		}
	}
	return d.conn, err
}

// dialTLS dials the request's endpoint and runs the mesh handshake
// expecting the endpoint's identity. The transport's dial context carries
// the values of the request that caused the dial.
func (p *Proxy) dialTLS(ctx context.Context, _, addr string) (net.Conn, error) {
	ep, ok := ctx.Value(endpointKey{}).(Endpoint)
	if !ok || ep.Identity.IsZero() || ep.Addr.String() != addr {
		return nil, &dialError{err: fmt.Errorf("no mesh identity known for %s", addr)}
	}
	d, err := p.connect(ctx, addr, ep.Identity, ep.Via)
	if err != nil {
		ep.connectFailed(err)
	} else {
		ep.connected()
	}
	return d.conn, err
}

// dialUpstream opens a fast-path upstream connection to ep.
func (p *Proxy) dialUpstream(ep Endpoint) (*upstream, error) {
	d, err := p.connect(context.Background(), ep.Addr.String(), ep.Identity, ep.Via)
	if err != nil {
		ep.connectFailed(err)
		return nil, err
	}
	return newUpstream(d, p.opts.WriteTimeout), nil
}

// dialed is a new upstream connection: conn to use, and nb, the TCP
// socket's wrapper under it (and under mesh TLS, if any) that can tell
// whether anything waits on the connection (nil if the dialer gave no
// socket).
type dialed struct {
	conn net.Conn
	nb   *nbConn
}

// connect dials addr, through the gateway via if set (and, with id, runs
// the mesh handshake) within the connect timeout.
func (p *Proxy) connect(ctx context.Context, addr string, id spiffe.ID, via netip.AddrPort) (dialed, error) {
	dst, err := netip.ParseAddrPort(addr)
	if err != nil {
		return dialed{}, &dialError{err: fmt.Errorf("destination %q: %w", addr, err)}
	}
	if !id.IsZero() && p.opts.Secure == nil {
		return dialed{}, &dialError{err: fmt.Errorf("mesh mTLS to %s requested without a way to run it", addr)}
	}
	request := ctx
	if p.opts.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.opts.ConnectTimeout)
		defer cancel()
	}
	c, err := passthrough.Dial(ctx, p.opts.Dial, via, dst)
	if err != nil {
		return dialed{}, &dialError{err: err, marksDown: request.Err() == nil && connectReason(err) != ReasonConnectError}
	}
	var d dialed
	if sc, ok := c.(interface {
		SyscallConn() (syscall.RawConn, error)
	}); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			d.nb = newNBConn(c, raw)
			c = d.nb
		}
	}
	m, dir := p.opts.Metrics, p.opts.Direction
	var t metrics.TLS
	if !id.IsZero() {
		if c, err = p.opts.Secure(ctx, c, id); err != nil {
			return dialed{}, &dialError{err: &tlsError{err}}
		}
		t = metrics.TLS{On: true, PeerID: m.PeerID(dir, id)}
	}
	d.conn = m.TrackConn(c, dir, m.Target(dir, dst), metrics.PeerDst, t)
	return d, nil
}
