// Package httpproxy forwards HTTP/1.1 and HTTP/2 (h2c, gRPC) requests to
// their original destination over pooled upstream connections.
package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/plexus-mesh/plexus/control/spiffe"
	"github.com/plexus-mesh/plexus/sidecar/forward"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
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

// Route is where one request goes.
type Route struct {
	Addr netip.AddrPort
	// Identity is the identity the upstream proxy must prove over mesh
	// mTLS; zero means plaintext.
	Identity spiffe.ID
	// Done, when set, is called once the request has finished.
	Done func()
}

// ErrNoEndpoints is wrapped by a Route error when the destination exists
// but has no endpoint to send to (answered 503, reason no-endpoints).
var ErrNoEndpoints = errors.New("no ready endpoints")

type routeKey struct{}

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
	// TunnelIdleTimeout closes an Upgrade (WebSocket) tunnel with no bytes
	// either way for this long.
	TunnelIdleTimeout time.Duration
	// MaxIdleConnsPerHost bounds the pool kept for each destination.
	MaxIdleConnsPerHost int
	// Route chooses the upstream of each request (outbound load
	// balancing, per request so keep-alive clients spread too). nil: the
	// original destination, plaintext.
	Route func(ctx context.Context, dst netip.AddrPort) (Route, error)
	// Secure runs the mesh mTLS client handshake on a dialled upstream
	// connection that must prove id. Needed when Route returns identities.
	Secure func(ctx context.Context, c net.Conn, id spiffe.ID) (net.Conn, error)
	// ReadHeaderTimeout bounds how long an HTTP/1 client on the fast path
	// may take to send a request head once it started (slowloris).
	ReadHeaderTimeout time.Duration
	// ClientIdleTimeout closes a fast-path client connection that sends
	// no new request for this long.
	ClientIdleTimeout time.Duration
}

// Proxy is an http.Handler that forwards each request to the destination
// in its context. HTTP/1 requests go upstream as HTTP/1.1, HTTP/2
// requests as HTTP/2 with prior knowledge, each over its own pool.
type Proxy struct {
	opts Options
	h1   *http.Transport
	h2   *http.Transport
	// Upstreams over mesh mTLS have their own pools, so a request that
	// must be encrypted never reuses a plaintext connection to the same
	// address.
	h1TLS *http.Transport
	h2TLS *http.Transport
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
		tun:  forward.New(opts.TunnelIdleTimeout),
	}
	p.h1pool.max, p.h1pool.timeout = opts.MaxIdleConnsPerHost, opts.IdleConnTimeout
	mk := func(h2, secure bool) *http.Transport {
		dial := p.dial
		if secure {
			dial = p.dialTLS
		}
		t := &http.Transport{
			Proxy:                  nil, // never honour HTTP_PROXY: we are the proxy
			DialContext:            dial,
			MaxIdleConns:           0,
			MaxIdleConnsPerHost:    opts.MaxIdleConnsPerHost,
			IdleConnTimeout:        opts.IdleConnTimeout,
			DisableCompression:     true,
			MaxResponseHeaderBytes: 64 << 10,
			Protocols:              new(http.Protocols),
		}
		if h2 {
			t.Protocols.SetUnencryptedHTTP2(true)
		} else {
			t.Protocols.SetHTTP1(true)
		}
		return t
	}
	p.h1, p.h2 = mk(false, false), mk(true, false)
	p.h1TLS, p.h2TLS = mk(false, true), mk(true, true)
	return p
}

// CloseIdle closes pooled upstream connections that are idle.
func (p *Proxy) CloseIdle() {
	for _, t := range []*http.Transport{p.h1, p.h2, p.h1TLS, p.h2TLS} {
		t.CloseIdleConnections()
	}
	p.h1pool.closeIdle()
}

// dialError marks an error from connecting upstream.
type dialError struct{ err error }

func (e *dialError) Error() string { return "connect: " + e.err.Error() }
func (e *dialError) Unwrap() error { return e.err }

// tlsError marks a failed mesh mTLS handshake with the upstream proxy.
type tlsError struct{ err error }

func (e *tlsError) Error() string { return e.err.Error() }
func (e *tlsError) Unwrap() error { return e.err }

func (p *Proxy) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	c, _, err := p.connect(ctx, addr, spiffe.ID{})
	return c, err
}

// dialTLS dials the address of the request's route and runs the mesh
// handshake expecting the route's identity. The transport's dial context
// carries the values of the request that caused the dial.
func (p *Proxy) dialTLS(ctx context.Context, _, addr string) (net.Conn, error) {
	rt, ok := ctx.Value(routeKey{}).(Route)
	if !ok || rt.Identity.IsZero() || rt.Addr.String() != addr {
		return nil, &dialError{fmt.Errorf("no mesh identity known for %s", addr)}
	}
	c, _, err := p.connect(ctx, addr, rt.Identity)
	return c, err
}

// dialUpstream opens a fast-path upstream connection for rt.
func (p *Proxy) dialUpstream(rt Route) (*upstream, error) {
	c, raw, err := p.connect(context.Background(), rt.Addr.String(), rt.Identity)
	if err != nil {
		return nil, err
	}
	return newUpstream(c, raw), nil
}

// connect dials addr (and, with id, runs the mesh handshake) within the
// connect timeout. raw is the TCP socket under the connection, when the
// dialer returned one.
func (p *Proxy) connect(ctx context.Context, addr string, id spiffe.ID) (_ net.Conn, raw syscall.RawConn, _ error) {
	dst, err := netip.ParseAddrPort(addr)
	if err != nil {
		return nil, nil, &dialError{fmt.Errorf("destination %q: %w", addr, err)}
	}
	if !id.IsZero() && p.opts.Secure == nil {
		return nil, nil, &dialError{fmt.Errorf("mesh mTLS to %s requested without a way to run it", addr)}
	}
	if p.opts.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.opts.ConnectTimeout)
		defer cancel()
	}
	c, err := p.opts.Dial(ctx, dst)
	if err != nil {
		return nil, nil, &dialError{err}
	}
	if sc, ok := c.(interface {
		SyscallConn() (syscall.RawConn, error)
	}); ok {
		raw, _ = sc.SyscallConn()
	}
	m, dir := p.opts.Metrics, p.opts.Direction
	var t metrics.TLS
	if !id.IsZero() {
		if c, err = p.opts.Secure(ctx, c, id); err != nil {
			return nil, nil, &dialError{&tlsError{err}}
		}
		t = metrics.TLS{On: true, PeerID: m.PeerID(dir, id)}
	}
	return m.TrackConn(c, dir, m.Target(dir, dst), metrics.PeerDst, t), raw, nil
}

// ServeHTTP forwards r to its destination and copies the response back,
// trailers included, flushing streamed bodies as they arrive.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dir, m := p.opts.Direction, p.opts.Metrics
	dst, ok := Destination(r.Context())
	if !ok {
		http.Error(w, "no destination", http.StatusInternalServerError)
		return
	}
	rt := Route{Addr: dst}
	var routeErr error
	if p.opts.Route != nil {
		rt, routeErr = p.opts.Route(r.Context(), dst)
		if rt.Done != nil {
			defer rt.Done()
		}
	}
	tl, _ := r.Context().Value(tlsKey{}).(metrics.TLS)
	if !rt.Identity.IsZero() {
		tl = metrics.TLS{On: true, PeerID: m.PeerID(dir, rt.Identity)}
	}
	rec := m.StartRequest(dir, m.Target(dir, dst), m.Authority(dir, r.Host), tl)
	grpc := isGRPC(r.Header)
	if routeErr != nil {
		p.fail(w, r, rec, grpc, routeErr)
		return
	}
	upgrade := ""
	if r.ProtoMajor == 1 {
		upgrade = upgradeType(r.Header)
	}

	out := outgoing(r, rt.Addr, upgrade)
	t := p.h1
	switch {
	case r.ProtoMajor == 2 && !rt.Identity.IsZero():
		t = p.h2TLS
	case r.ProtoMajor == 2:
		t = p.h2
	case !rt.Identity.IsZero():
		t = p.h1TLS
	}
	if !rt.Identity.IsZero() {
		out = out.WithContext(context.WithValue(out.Context(), routeKey{}, rt))
	}
	res, err := t.RoundTrip(out)
	if err != nil {
		p.fail(w, r, rec, grpc, err)
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		p.tunnel(w, r, res, rec, upgrade)
		return
	}
	defer res.Body.Close()
	rec.Headers(res.StatusCode)

	removeHopByHop(res.Header)
	h := w.Header()
	for k, vv := range res.Header {
		h[k] = vv
	}
	for k := range res.Trailer {
		h.Add("Trailer", k)
	}
	w.WriteHeader(res.StatusCode)

	stream := res.ContentLength < 0
	if err := p.copyBody(w, res.Body, stream); err != nil {
		var we *writeError
		reason := ReasonUpstreamReset
		if errors.As(err, &we) {
			reason = ReasonClientReset
		}
		p.opts.Log.Debug("response body aborted", "direction", dir, "dst", dst, "reason", reason, "err", err)
		if reason == ReasonUpstreamReset && grpc && r.ProtoMajor == 2 && grpcStatus(res) == "" {
			// A gRPC stream whose server vanished: end it with status
			// UNAVAILABLE in the trailers, which gRPC clients understand
			// (an RST_STREAM would surface as INTERNAL).
			h[http.TrailerPrefix+"Grpc-Status"] = []string{"14"}
			h[http.TrailerPrefix+"Grpc-Message"] = []string{"plexus-proxy: " + reason}
			h[http.TrailerPrefix+ErrorHeader] = []string{reason}
			rec.Done(res.StatusCode, "14", reason)
			return
		}
		rec.Done(res.StatusCode, grpcStatus(res), reason)
		// Abort the client's stream (HTTP/2 RST_STREAM, HTTP/1 close
		// without the final chunk) so it sees a failure, not a clean end.
		panic(http.ErrAbortHandler)
	}
	// Announced or not, TrailerPrefix makes net/http send each as a trailer.
	for k, vv := range res.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
	rec.Done(res.StatusCode, grpcStatus(res), "")
}

// writeError marks a failure writing to the client.
type writeError struct{ err error }

func (e *writeError) Error() string { return "write to client: " + e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// copyBody copies body to w with a pooled buffer, flushing after each
// chunk when stream is set (unknown length: gRPC, SSE, chunked streams).
func (p *Proxy) copyBody(w http.ResponseWriter, body io.Reader, stream bool) error {
	buf := p.bufs.Get().(*[32 << 10]byte)
	defer p.bufs.Put(buf)
	rc := http.NewResponseController(w)
	for {
		n, rerr := body.Read(buf[:])
		if n > 0 {
			if _, err := w.Write(buf[:n]); err != nil {
				return &writeError{err}
			}
			if stream {
				if err := rc.Flush(); err != nil {
					return &writeError{err}
				}
			}
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return fmt.Errorf("read upstream body: %w", rerr)
		}
	}
}

// outgoing builds the upstream request: same method, target, Host and
// body; hop-by-hop headers removed; the URL pointed at dst.
func outgoing(r *http.Request, dst netip.AddrPort, upgrade string) *http.Request {
	u := *r.URL
	u.Scheme, u.Host = "http", dst.String()
	out := r.WithContext(r.Context()) // shallow copy; headers cloned below
	out.URL = &u
	out.RequestURI = ""
	out.Header = r.Header.Clone()
	if out.Header == nil {
		out.Header = http.Header{}
	}
	removeHopByHop(out.Header)
	if keepsTrailersTE(r.Header) {
		out.Header.Set("Te", "trailers")
	}
	if upgrade != "" {
		out.Header.Set("Connection", "Upgrade")
		out.Header.Set("Upgrade", upgrade)
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	out.Close = false
	return out
}

func isGRPC(h http.Header) bool {
	ct := h.Get("Content-Type")
	return len(ct) >= 16 && ct[:16] == "application/grpc"
}

// grpcStatus is grpc-status from the trailers, or from the headers of a
// trailers-only response; "" when the response carries none.
func grpcStatus(res *http.Response) string {
	if s := res.Trailer.Get("Grpc-Status"); s != "" {
		return s
	}
	return res.Header.Get("Grpc-Status")
}
