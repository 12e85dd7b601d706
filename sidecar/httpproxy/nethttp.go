package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"strconv"
	"sync"
	"time"

	"github.com/plexus-mesh/plexus/mesh/policy/pathnorm"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// The net/http engine: the HTTP/1 requests the fast path hands off, and
// HTTP/2, parsed by net/http's server and taken through the pipeline.

// ServeHTTP takes a request net/http's server parsed (HTTP/1 the fast path
// handed off, and HTTP/2) through the pipeline, and copies the response
// back, trailers included, flushing streamed bodies as they arrive.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	dst, ok := Destination(r.Context())
	if !ok {
		http.Error(w, "no destination", http.StatusInternalServerError)
		return
	}
	grpc := isGRPC(r.Header)
	if grpc {
		var cancel context.CancelFunc
		r, cancel = withGRPCDeadline(r)
		defer cancel()
	}
	tl, _ := r.Context().Value(tlsKey{}).(metrics.TLS)
	req := &Request{
		Direction: p.opts.Direction, Dst: dst, TLS: tl,
		Method: r.Method, Authority: r.Host, Path: r.URL.RequestURI(), Header: r.Header,
		ContentLength: r.ContentLength, GRPC: grpc,
	}
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		req.Client = ap.Addr().Unmap()
	}
	if r.ProtoMajor == 1 && r.ContentLength < 0 {
		req.Chunked = true
		// RFC 9112 §6.1: the request may also have carried a
		// Content-Length (net/http drops it and frames by chunks), so
		// the bytes after it cannot be trusted as a next request: close
		// after answering, as the RFC requires.
		w.Header().Set("Connection", "close")
	}
	target := req.Path
	var x exchange
	err := p.begin(r.Context(), &x, req, nil)
	defer x.end()
	if err != nil {
		p.answerHTTP(w, r, x.fail(timeoutCause(r.Context(), err)))
		return
	}
	if req.Path != target {
		// Forward the path in the normal form decided on.
		pathnorm.SetURL(r.URL, req.Path)
	}
	upgrade := ""
	if r.ProtoMajor == 1 {
		upgrade = upgradeType(r.Header)
	}
	if !x.plain() && (upgrade == "" || x.rule.Redirects()) {
		p.serveRule(w, r, &x)
		return
	}
	out := outgoing(r, x.endpoint.Addr, upgrade)
	if x.rule != nil {
		// An Upgrade (WebSocket) tunnel takes the rule's request
		// filters; timeouts and retries do not apply to a tunnel.
		x.rule.RewriteRequest(x.backend, out, x.match)
	}
	var body *replayBody
	if holdsBody(r, false) {
		// Held on HTTP/2 for the transport's own sending again after a
		// GOAWAY (sendWith).
		body = newReplayBody(out.Body)
		body.sendWith(out)
	}
	res, done, err := p.send(r.Context(), &x, r, out)
	defer done()
	if body != nil {
		body.forget() // response headers (or an error): no more sending again
	}
	if err != nil {
		p.answerHTTP(w, r, x.fail(timeoutCause(r.Context(), err)))
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

// send makes one attempt of r (as out, built by outgoing) to x's endpoint
// and returns the response with its headers. done must be called once the
// response has been relayed (it ends the attempt's context).
func (p *Proxy) send(ctx context.Context, x *exchange, r, out *http.Request) (res *http.Response, done func(), err error) {
	// Hooks only for the limits net/http does not apply itself: its
	// transport stops at 5 interim responses, and knows no
	// response-header timeout per request.
	done = func() {}
	var wait headerWait
	var trace httptrace.ClientTrace
	if p.opts.MaxInformational < transport1xxLimit {
		trace.Got1xxResponse = p.count1xx()
	}
	if x.headerTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithCancel(ctx)
		done = cancel
		wait = headerWait{timeout: x.headerTimeout, cancel: cancel}
		trace.WroteRequest = wait.start
	}
	if trace.Got1xxResponse != nil || trace.WroteRequest != nil {
		ctx = httptrace.WithClientTrace(ctx, &trace)
	}
	err = x.attempt(func(int) error {
		// The transport makes its own retry on a pooled connection its
		// server closed, by the same rule; this is one attempt for us.
		// A re-send may go to another endpoint.
		var t http.RoundTripper = p.h1
		actx := ctx
		switch {
		case r.ProtoMajor == 2 && !x.endpoint.Identity.IsZero():
			t = p.h2TLS
		case r.ProtoMajor == 2:
			t = p.h2
		case !x.endpoint.Identity.IsZero():
			t = p.h1TLS
		}
		// The dialers read the endpoint: its identity, and its Load to
		// tell of a new connection.
		actx = context.WithValue(ctx, endpointKey{}, x.endpoint)
		u := *out.URL
		u.Host = x.endpoint.Addr.String()
		o := out.WithContext(actx)
		o.URL = &u
		if x.req.GRPC {
			setGRPCTimeout(ctx, o.Header)
		}
		var err error
		res, err = t.RoundTrip(o)
		if err == nil && res.Header.Get(ErrorHeader) != "" {
			// 502 connect-refused / upstream-reset, 503 draining.
			if perr := peerError(!x.endpoint.Identity.IsZero(), res.StatusCode, res.Header.Get(ErrorHeader)); perr != nil && x.willResend(perr) {
				x.answered() // the peer's proxy answered: it is alive
				res.Body.Close()
				res, err = nil, perr
			}
		}
		return err
	})
	if wait.stop() {
		err = &limitError{metrics.LimitResponseHeaders, context.DeadlineExceeded}
	}
	return res, done, err
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
	if grpc && res.ContentLength < 0 {
		// A gRPC stream's headers go out now: its server may wait for
		// the client's next message, and the client for the headers.
		http.NewResponseController(w).Flush()
	}
	if err := p.copyBody(w, res.Body, res.ContentLength < 0, &x.bodyBytes); err != nil {
		var we *writeError
		var re *routeError
		reason, grpcCancel := ReasonUpstreamReset, "14" // UNAVAILABLE
		msg := "plexus-proxy: " + reason + ": the upstream stream broke off"
		ctx := r.Context()
		if x.attemptCtx != nil {
			ctx = x.attemptCtx
		}
		err = timeoutCause(ctx, err) // a route timeout or the call's deadline cut the body
		switch {
		case errors.As(err, &we):
			reason = ReasonClientReset
			p.countLimit(limited(err, metrics.LimitWriteStall))
		case errors.As(err, &re):
			reason, grpcCancel = re.reason, strconv.Itoa(grpcCode(re.status))
			msg = "plexus-proxy: " + reason + ": " + re.msg
		}
		p.opts.Log.Debug("response body aborted", "direction", p.opts.Direction, "dst", x.req.Dst, "reason", reason, "err", err)
		if reason != ReasonClientReset && grpc && r.ProtoMajor == 2 && grpcStatus(res) == "" {
			// A gRPC stream whose server vanished (UNAVAILABLE) or that
			// a route timeout cut (DEADLINE_EXCEEDED): end it with the
			// status in the trailers, which gRPC clients understand (an
			// RST_STREAM would surface as INTERNAL).
			h[http.TrailerPrefix+"Grpc-Status"] = []string{grpcCancel}
			h[http.TrailerPrefix+"Grpc-Message"] = []string{msg}
			h[http.TrailerPrefix+ErrorHeader] = []string{reason}
			x.finish(res.StatusCode, grpcCancel, reason)
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
func (p *Proxy) copyBody(w http.ResponseWriter, body io.Reader, stream bool, copied *int64) error {
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
			*copied += int64(n)
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
