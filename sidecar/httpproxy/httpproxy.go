// Package httpproxy forwards HTTP/1.1 and HTTP/2 (h2c, gRPC) requests to
// their original destination over pooled upstream connections.
package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
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

// Endpoint is where one request goes.
type Endpoint struct {
	Addr netip.AddrPort
	// Identity is the identity the upstream proxy must prove over mesh
	// mTLS; zero means plaintext.
	Identity spiffe.ID
	// Done, when set, is called once the request has finished.
	Done func()
}

// ErrNoEndpoints is wrapped by a Balance error when the destination exists
// but has no endpoint to send to (answered 503, reason no-endpoints).
var ErrNoEndpoints = errors.New("no ready endpoints")

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
	// Balance chooses the endpoint of each request (outbound load
	// balancing, per request so keep-alive clients spread too). nil: the
	// original destination, plaintext.
	Balance func(ctx context.Context, dst netip.AddrPort) (Endpoint, error)
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
		tun:  forward.New(opts.IdleTimeout),
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
	d, err := p.connect(ctx, addr, spiffe.ID{})
	return d.conn, err
}

// dialTLS dials the request's endpoint and runs the mesh handshake
// expecting the endpoint's identity. The transport's dial context carries
// the values of the request that caused the dial.
func (p *Proxy) dialTLS(ctx context.Context, _, addr string) (net.Conn, error) {
	ep, ok := ctx.Value(endpointKey{}).(Endpoint)
	if !ok || ep.Identity.IsZero() || ep.Addr.String() != addr {
		return nil, &dialError{fmt.Errorf("no mesh identity known for %s", addr)}
	}
	d, err := p.connect(ctx, addr, ep.Identity)
	return d.conn, err
}

// dialUpstream opens a fast-path upstream connection to ep.
func (p *Proxy) dialUpstream(ep Endpoint) (*upstream, error) {
	d, err := p.connect(context.Background(), ep.Addr.String(), ep.Identity)
	if err != nil {
		return nil, err
	}
	return newUpstream(d, p.opts.WriteTimeout), nil
}

// dialed is a new upstream connection: conn to use, raw its TCP socket
// (nil if the dialer gave none), nb under mesh TLS (nil in plaintext).
type dialed struct {
	conn net.Conn
	raw  syscall.RawConn
	nb   *nbConn
}

// connect dials addr (and, with id, runs the mesh handshake) within the
// connect timeout.
func (p *Proxy) connect(ctx context.Context, addr string, id spiffe.ID) (dialed, error) {
	dst, err := netip.ParseAddrPort(addr)
	if err != nil {
		return dialed{}, &dialError{fmt.Errorf("destination %q: %w", addr, err)}
	}
	if !id.IsZero() && p.opts.Secure == nil {
		return dialed{}, &dialError{fmt.Errorf("mesh mTLS to %s requested without a way to run it", addr)}
	}
	if p.opts.ConnectTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.opts.ConnectTimeout)
		defer cancel()
	}
	c, err := p.opts.Dial(ctx, dst)
	if err != nil {
		return dialed{}, &dialError{err}
	}
	var d dialed
	if sc, ok := c.(interface {
		SyscallConn() (syscall.RawConn, error)
	}); ok {
		d.raw, _ = sc.SyscallConn()
	}
	m, dir := p.opts.Metrics, p.opts.Direction
	var t metrics.TLS
	if !id.IsZero() {
		if d.raw != nil {
			d.nb = newNBConn(c, d.raw)
			c = d.nb
		}
		if c, err = p.opts.Secure(ctx, c, id); err != nil {
			return dialed{}, &dialError{&tlsError{err}}
		}
		t = metrics.TLS{On: true, PeerID: m.PeerID(dir, id)}
	}
	d.conn = m.TrackConn(c, dir, m.Target(dir, dst), metrics.PeerDst, t)
	return d, nil
}

// ServeHTTP takes a request net/http's server parsed (HTTP/1 the fast path
// handed off, and HTTP/2) through the pipeline, and copies the response
// back, trailers included, flushing streamed bodies as they arrive.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dst, ok := Destination(r.Context())
	if !ok {
		http.Error(w, "no destination", http.StatusInternalServerError)
		return
	}
	tl, _ := r.Context().Value(tlsKey{}).(metrics.TLS)
	req := &Request{
		Direction: p.opts.Direction, Dst: dst, TLS: tl,
		Method: r.Method, Authority: r.Host, Path: r.URL.RequestURI(), Header: r.Header,
		ContentLength: r.ContentLength, GRPC: isGRPC(r.Header),
	}
	if r.ProtoMajor == 1 && r.ContentLength < 0 {
		req.Chunked = true
		// RFC 9112 §6.1: the request may also have carried a
		// Content-Length (net/http drops it and frames by chunks), so
		// the bytes after it cannot be trusted as a next request: close
		// after answering, as the RFC requires.
		w.Header().Set("Connection", "close")
	}
	var x exchange
	err := p.begin(r.Context(), &x, req, nil)
	defer x.end()
	if err != nil {
		p.answerHTTP(w, r, x.fail(err))
		return
	}
	upgrade := ""
	if r.ProtoMajor == 1 {
		upgrade = upgradeType(r.Header)
	}
	out := outgoing(r, x.endpoint.Addr, upgrade)
	t := p.h1
	switch {
	case r.ProtoMajor == 2 && !x.endpoint.Identity.IsZero():
		t = p.h2TLS
	case r.ProtoMajor == 2:
		t = p.h2
	case !x.endpoint.Identity.IsZero():
		t = p.h1TLS
	}
	ctx := out.Context()
	if !x.endpoint.Identity.IsZero() {
		ctx = context.WithValue(ctx, endpointKey{}, x.endpoint)
	}
	// Hooks only for the limits net/http does not apply itself: its
	// transport stops at 5 interim responses, and knows no
	// response-header timeout per request.
	var wait headerWait
	var trace httptrace.ClientTrace
	if p.opts.MaxInformational < transport1xxLimit {
		trace.Got1xxResponse = p.count1xx()
	}
	if x.headerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		defer cancel()
		wait = headerWait{timeout: x.headerTimeout, cancel: cancel}
		trace.WroteRequest = wait.start
	}
	if trace.Got1xxResponse != nil || trace.WroteRequest != nil {
		ctx = httptrace.WithClientTrace(ctx, &trace)
	}
	out = out.WithContext(ctx)
	var res *http.Response
	err = x.attempt(func(int) error {
		// The transport makes its own retry on a pooled connection its
		// server closed, by the same rule; this is one attempt for us.
		var err error
		res, err = t.RoundTrip(out)
		return err
	})
	if wait.stop() {
		err = &limitError{metrics.LimitResponseHeaders, context.DeadlineExceeded}
	}
	if err != nil {
		p.answerHTTP(w, r, x.fail(err))
		return
	}
	if res.StatusCode == http.StatusSwitchingProtocols {
		p.tunnel(w, r, res, &x, upgrade)
		return
	}
	defer res.Body.Close()
	x.headers(res.StatusCode)
	p.relayHTTP(w, r, res, &x)
}

// headerWait is the response-header timeout on the net/http path: it runs
// from the moment the request is written (body included) until response
// headers arrive, and then no longer (the request's context also covers
// the response body, which may take as long as it takes).
type headerWait struct {
	timeout time.Duration
	cancel  context.CancelFunc

	mu       sync.Mutex
	timer    *time.Timer
	done     bool
	timedOut bool
}

// start is the trace's WroteRequest hook.
func (h *headerWait) start(httptrace.WroteRequestInfo) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.timeout > 0 && !h.done && h.timer == nil {
		h.timer = time.AfterFunc(h.timeout, func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if !h.done {
				h.timedOut = true
				h.cancel()
			}
		})
	}
}

// stop ends the wait once RoundTrip returned, and reports whether the
// timeout had fired.
func (h *headerWait) stop() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.done = true
	if h.timer != nil {
		h.timer.Stop()
	}
	return h.timedOut
}

// transport1xxLimit is where net/http's transport stops reading interim
// responses itself (its error is answered 502 like ours).
const transport1xxLimit = 5

// count1xx returns a trace hook that fails the request (502) past the
// interim response limit, when it is below net/http's own.
func (p *Proxy) count1xx() func(int, textproto.MIMEHeader) error {
	n := 0
	return func(int, textproto.MIMEHeader) error {
		if n++; n > p.opts.MaxInformational {
			return &limitError{metrics.LimitInformational, errTooMany1xx}
		}
		return nil
	}
}

// relayHTTP copies res to w: headers, body (with write deadlines) and
// trailers.
func (p *Proxy) relayHTTP(w http.ResponseWriter, r *http.Request, res *http.Response, x *exchange) {
	removeHopByHop(res.Header)
	h := w.Header()
	for k, vv := range res.Header {
		h[k] = vv
	}
	for k := range res.Trailer {
		h.Add("Trailer", k)
	}
	w.WriteHeader(res.StatusCode)
	grpc := x.req.GRPC
	if err := p.copyBody(w, res.Body, res.ContentLength < 0); err != nil {
		var we *writeError
		reason := ReasonUpstreamReset
		if errors.As(err, &we) {
			reason = ReasonClientReset
			p.countLimit(limited(err, metrics.LimitWriteStall))
		}
		p.opts.Log.Debug("response body aborted", "direction", p.opts.Direction, "dst", x.req.Dst, "reason", reason, "err", err)
		if reason == ReasonUpstreamReset && grpc && r.ProtoMajor == 2 && grpcStatus(res) == "" {
			// A gRPC stream whose server vanished: end it with status
			// UNAVAILABLE in the trailers, which gRPC clients understand
			// (an RST_STREAM would surface as INTERNAL).
			h[http.TrailerPrefix+"Grpc-Status"] = []string{"14"}
			h[http.TrailerPrefix+"Grpc-Message"] = []string{"plexus-proxy: " + reason}
			h[http.TrailerPrefix+ErrorHeader] = []string{reason}
			x.finish(res.StatusCode, "14", reason)
			return
		}
		x.finish(res.StatusCode, grpcStatus(res), reason)
		// Abort the client's stream (HTTP/2 RST_STREAM, HTTP/1 close
		// without the final chunk) so it sees a failure, not a clean end.
		panic(http.ErrAbortHandler)
	}
	// Announced or not, TrailerPrefix makes net/http send each as a trailer.
	for k, vv := range res.Trailer {
		h[http.TrailerPrefix+k] = vv
	}
	x.finish(res.StatusCode, grpcStatus(res), "")
}

// answerHTTP writes the pipeline's answer through net/http.
func (p *Proxy) answerHTTP(w http.ResponseWriter, r *http.Request, a answer) {
	if a.reason == ReasonClientGone {
		return
	}
	maps.Copy(w.Header(), a.header)
	w.WriteHeader(a.status)
	if r.Method != http.MethodHead {
		io.WriteString(w, a.body)
	}
}

// writeError marks a failure writing to the client.
type writeError struct{ err error }

func (e *writeError) Error() string { return "write to client: " + e.err.Error() }
func (e *writeError) Unwrap() error { return e.err }

// copyBody copies body to w with a pooled buffer, flushing after each
// chunk when stream is set (unknown length: gRPC, SSE, chunked streams).
// Each write must make progress within about the write timeout.
func (p *Proxy) copyBody(w http.ResponseWriter, body io.Reader, stream bool) error {
	buf := p.bufs.Get().(*[32 << 10]byte)
	defer p.bufs.Put(buf)
	rc := http.NewResponseController(w)
	var renewAt time.Time
	for {
		n, rerr := body.Read(buf[:])
		if n > 0 {
			if p.opts.WriteTimeout > 0 {
				renew(rc.SetWriteDeadline, p.opts.WriteTimeout, &renewAt)
			}
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
