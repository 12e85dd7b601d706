package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/mtls/replay"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// ClientConn is a client connection for the proxy to serve.
type ClientConn struct {
	net.Conn
	// Raw is the TCP socket under Conn (under TLS, if any), used to notice
	// a client that leaves while its request waits; nil: not noticed
	// until the response is written.
	Raw syscall.RawConn
	Dst netip.AddrPort // the original destination
	TLS metrics.TLS    // the mesh TLS Conn arrived with
}

// h1conn is one client connection served by the fast path.
type h1conn struct {
	p      *Proxy
	c      net.Conn
	dst    netip.AddrPort
	tls    metrics.TLS
	client netip.Addr
	rd     *h1reader
	wr     h1writer
	head   reqHead
	req    Request
	x      exchange
	watch  clientWatch
	series metrics.Series
	idle   atomic.Bool              // waiting for the next request
	up     atomic.Pointer[upstream] // in use, for Shutdown and the watch to cut
	// own is the idle upstream connection kept for this client alone
	// (Options.IsolateClients).
	own *upstream
}

// ServeHTTP1 serves the HTTP/1.1 requests a client sends on cc, one at a
// time, until the client closes, a timeout or error, or Shutdown; then it
// closes cc and returns nil. The first request the fast path does not
// handle (see reqHead.plain) is not served: ServeHTTP1 returns the
// connection for net/http's server, with every byte already read
// replayed first.
func (p *Proxy) ServeHTTP1(cc ClientConn) (handoff net.Conn) {
	hc := &h1conn{p: p, c: cc.Conn, dst: cc.Dst, tls: cc.TLS, client: remoteAddr(cc.Conn), rd: newReader(cc.Conn, h1ReadBuf),
		wr: h1writer{c: cc.Conn, idle: p.opts.WriteTimeout}}
	hc.watch.hc, hc.watch.raw = hc, cc.Raw
	if !p.h1conns.add(hc) {
		hc.refuseDraining()
		cc.Close()
		return nil
	}
	defer p.h1conns.remove(hc)
	defer hc.dropOwn()
	for {
		ok, handOff := hc.next()
		if handOff {
			hc.rd.until(time.Time{})
			return &replay.Conn{Conn: hc.c, Data: append([]byte(nil), hc.rd.buffered()...)}
		}
		if !ok {
			hc.c.Close()
			return nil
		}
	}
}

// next reads and forwards one request. ok is false when the connection
// must close; handOff when the request is for net/http.
func (hc *h1conn) next() (ok, handOff bool) {
	o := &hc.p.opts
	if len(hc.rd.buffered()) == 0 {
		hc.idle.Store(true)
		if hc.p.h1conns.draining.Load() {
			hc.refuseDraining()
			return false, false
		}
		hc.rd.due(o.ClientIdleTimeout)
		err := hc.rd.fill(h1ReadBuf)
		hc.idle.Store(false)
		if err != nil {
			if isTimeout(err) && hc.p.h1conns.draining.Load() {
				hc.refuseDraining() // Shutdown woke the idle read
			}
			return false, false
		}
	}
	if headEnd(hc.rd.buffered()) < 0 && o.ReadHeaderTimeout > 0 {
		hc.rd.due(o.ReadHeaderTimeout)
	}
	raw, err := hc.rd.head(h1ReadBuf)
	if errors.Is(err, errHeadTooLarge) {
		return false, true
	}
	if err != nil {
		return false, false
	}
	hc.head = parseRequest(raw)
	if !hc.head.plain {
		return false, true
	}
	hc.fill(&hc.head)
	// Routes with filters, timeouts or retries, or a path to forward in
	// normal form (pathnorm): net/http's engine serves the request, and
	// routes it; it is handed over before it is routed here.
	t := hc.p.table(context.Background(), hc.dst)
	if !t.Plain() {
		return false, true
	}
	if hc.x.normalize(hc.p, &hc.req) {
		if hc.req.Path != string(hc.head.target) {
			return false, true
		}
		hc.x.matchRule(t)
	}
	// A body must keep coming; the head's deadline no longer applies.
	hc.rd.idleFor(o.BodyIdleTimeout)
	return hc.forward(&hc.head), false
}

// bodyBuffered reports whether the request's whole body (if any) is
// already in the read buffer after its head; such a request can be sent
// again, and skipped without reading.
func (hc *h1conn) bodyBuffered(h *reqHead) bool {
	return !h.hasBody() || (!h.chunked && int64(len(hc.rd.buffered())-len(h.raw)) >= h.contentLength)
}

// fill sets hc.req from the request head h.
func (hc *h1conn) fill(h *reqHead) {
	hc.req = Request{
		Direction: hc.p.opts.Direction, Dst: hc.dst, TLS: hc.tls, Client: hc.client,
		Method: methodString(h.method), Authority: string(h.host), Path: string(h.target), Header: h,
		ContentLength: h.contentLength, Chunked: h.chunked, GRPC: h.grpc,
		Replayable: hc.bodyBuffered(h),
	}
}

// forward takes one request through the pipeline and relays the outcome;
// it reports whether the client connection may carry another request.
func (hc *h1conn) forward(h *reqHead) bool {
	p := hc.p
	r := &hc.req
	x := &hc.x
	err := p.begin(context.Background(), x, r, &hc.series)
	defer x.end()
	if err != nil {
		return hc.answer(h, x.fail(err))
	}
	var key poolKey
	var up *upstream
	var res resHead
	err = x.attempt(func(n int) error {
		var err error
		key = poolKey{addr: x.endpoint.Addr, id: x.endpoint.Identity, via: x.endpoint.Via} // a re-send may go elsewhere
		up, res, err = hc.try(h, key, n)
		return err
	})
	if err != nil {
		return hc.answer(h, x.fail(err))
	}
	return hc.relay(up, key, h, res)
}

// try makes attempt n of the request: the first on a pooled connection
// when there is one, a retry always on a new connection (the pool may
// hold more connections a restarted server closed).
func (hc *h1conn) try(h *reqHead, key poolKey, n int) (*upstream, resHead, error) {
	var up *upstream
	if n == 0 {
		up = hc.pooled(key)
	}
	if up == nil {
		var err error
		if up, err = hc.p.dialUpstream(hc.x.endpoint); err != nil {
			return nil, resHead{}, err
		}
		hc.x.endpoint.connected()
	}
	hc.up.Store(up)
	res, err := hc.exchange(up, h)
	if err != nil {
		hc.up.Swap(nil)
		up.close()
		if hc.watch.gone.Load() {
			err = &clientError{err}
		}
		return nil, resHead{}, err
	}
	return up, res, nil
}

var errTooMany1xx = errors.New("too many interim (1xx) responses")

// exchange writes the request (head and body) to up and reads the
// response head, relaying interim (1xx) responses to the client. A
// replayable request stays in the client buffer until the exchange
// succeeds, so it can be sent again.
func (hc *h1conn) exchange(up *upstream, h *reqHead) (resHead, error) {
	o, x := &hc.p.opts, &hc.x
	up.wr.buf = h.appendUpstream(up.wr.buf[:0])
	if x.req.Replayable {
		n := len(h.raw)
		if h.contentLength > 0 {
			up.wr.buf = append(up.wr.buf, hc.rd.buffered()[n:n+int(h.contentLength)]...)
		}
		if err := up.wr.flush(); err != nil {
			return resHead{}, limited(&attemptError{err: err, reused: up.reused}, metrics.LimitWriteStall)
		}
	} else if err := hc.sendBody(up, h); err != nil {
		return resHead{}, err
	}
	up.rd.due(x.headerTimeout)
	hc.watch.arm()
	defer hc.watch.disarm()
	for interim := 0; ; {
		raw, err := up.rd.head(maxResponseHead)
		if err != nil {
			err = &attemptError{err: err, reused: up.reused, sent: true, answered: up.rd.got > 0}
			return resHead{}, limited(err, metrics.LimitResponseHeaders)
		}
		res, err := parseResponse(raw)
		if err != nil {
			return resHead{}, err
		}
		if res.proxyError != nil {
			if err := peerError(!x.endpoint.Identity.IsZero(), res.status, string(res.proxyError)); err != nil && x.willResend(err) {
				x.answered() // the peer's proxy answered: it is alive
				// The connection is closed (its answer unread): rare.
				return resHead{}, err
			}
		}
		if res.status >= 200 {
			if x.req.Replayable {
				hc.rd.discard(h.length())
			}
			return res, nil
		}
		if res.status == http.StatusSwitchingProtocols {
			return resHead{}, errUpgrade
		}
		if interim++; interim > o.MaxInformational {
			return resHead{}, &limitError{metrics.LimitInformational, errTooMany1xx}
		}
		// An interim response (e.g. 103 Early Hints): relay it and wait
		// for the final one.
		hc.wr.buf = res.appendClient(hc.wr.buf[:0], false)
		up.rd.discard(len(raw))
		if err := hc.wr.flush(); err != nil {
			return resHead{}, limited(&clientError{&writeError{err}}, metrics.LimitWriteStall)
		}
	}
}

// sendBody streams a request body the client has not sent whole yet.
func (hc *h1conn) sendBody(up *upstream, h *reqHead) error {
	hc.rd.discard(len(h.raw))
	buf := hc.p.bufs.Get().(*[32 << 10]byte)
	defer hc.p.bufs.Put(buf)
	cp := copier{r: hc.rd, w: &up.wr, buf: buf[:]}
	var err error
	if h.chunked {
		err = cp.copyChunked()
	} else {
		err = cp.copyN(h.contentLength)
	}
	if err == nil {
		if err = up.wr.flush(); err != nil {
			err = &dstError{err}
		}
	}
	var se *srcError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return limited(&clientError{se.err}, metrics.LimitRequestBodyIdle)
	default:
		return limited(&attemptError{err: err, reused: up.reused, sent: true, answered: up.rd.got > 0}, metrics.LimitWriteStall)
	}
}

// limited marks err as caused by limit when it is a timeout.
func limited(err error, limit string) error {
	if isTimeout(err) {
		return &limitError{limit, err}
	}
	return err
}

// relay writes the response head and body to the client, and keeps the
// upstream connection (key) when it can carry another request. It reports
// whether the client connection may go on.
func (hc *h1conn) relay(up *upstream, key poolKey, h *reqHead, res resHead) bool {
	p, x := hc.p, &hc.x
	x.headers(res.status)
	// res and h point into read buffers the body copy reuses: what is
	// needed after it is taken now.
	head := x.req.Method == http.MethodHead
	grpc := string(res.grpcStatus)
	closing := h.conn.close || res.untilClose(head) || p.h1conns.draining.Load()
	hc.wr.buf = res.appendClient(hc.wr.buf[:0], closing)
	up.rd.discard(len(res.raw))
	up.rd.idleFor(p.opts.IdleTimeout)
	buf := p.bufs.Get().(*[32 << 10]byte)
	defer p.bufs.Put(buf)
	cp := copier{r: up.rd, w: &hc.wr, buf: buf[:]}
	var err error
	switch {
	case res.bodyless(head):
	case res.chunked:
		err = cp.copyChunked()
	case res.contentLength >= 0:
		err = cp.copyN(res.contentLength)
	default:
		err = cp.copyUntilEOF()
	}
	// The watch may have closed the connection (its client left); then it
	// took it, and it must not go back to the pool.
	owned := hc.up.Swap(nil) == up
	x.bodyBytes = cp.n
	if err != nil {
		up.close()
		reason, limit := ReasonUpstreamReset, metrics.LimitIdle
		var de *dstError
		if errors.As(err, &de) {
			reason, limit = ReasonClientReset, metrics.LimitWriteStall
		}
		p.countLimit(limited(err, limit))
		p.opts.Log.Debug("response body aborted", "direction", p.opts.Direction, "dst", hc.dst, "reason", reason, "err", err)
		x.finish(res.status, grpc, reason)
		// Closing the client without the rest of the body tells it the
		// response broke.
		return false
	}
	// The response is read in full, so the upstream connection is free
	// before the last write to the client: a client's next request finds
	// it in the pool.
	if owned && res.reusable(head) && len(up.rd.buffered()) == 0 {
		hc.keep(key, up)
	} else {
		up.close()
	}
	// Counted before the last write, as under net/http (whose handler
	// returns before the server flushes): whoever reads the metrics after
	// the response sees it.
	x.finish(res.status, grpc, "")
	if err := hc.wr.flush(); err != nil {
		p.countLimit(limited(err, metrics.LimitWriteStall))
		return false
	}
	return !closing
}

// pooled returns an idle upstream connection for key that can carry a
// request, or nil.
func (hc *h1conn) pooled(key poolKey) *upstream {
	if !hc.p.opts.IsolateClients {
		return hc.p.h1pool.get(key)
	}
	u := hc.own
	hc.own = nil
	if u == nil {
		return nil
	}
	if u.key != key || !u.clean() {
		u.close()
		return nil
	}
	u.reused = true
	return u
}

// keep puts an upstream connection that can carry another request where
// the next request will look for it.
func (hc *h1conn) keep(key poolKey, u *upstream) {
	u.key = key
	if !hc.p.opts.IsolateClients {
		hc.p.h1pool.put(key, u)
		return
	}
	hc.dropOwn()
	u.rd.got = 0
	hc.own = u
}

func (hc *h1conn) dropOwn() {
	if hc.own != nil {
		hc.own.close()
		hc.own = nil
	}
}

// answer writes the answer the pipeline decided for a request that could
// not be forwarded. It reports whether the client connection may go on:
// only when the request, head and whole body, is still in the read buffer,
// where it is skipped.
func (hc *h1conn) answer(h *reqHead, a answer) bool {
	p := hc.p
	if a.reason == ReasonClientGone {
		return false
	}
	goOn := hc.req.Replayable && !h.conn.close && !p.h1conns.draining.Load()
	if goOn {
		hc.rd.discard(h.length())
	}
	a.header.Set("Content-Length", strconv.Itoa(len(a.body)))
	if !goOn {
		a.header.Set("Connection", "close")
	}
	b := fmt.Appendf(hc.wr.buf[:0], "HTTP/1.1 %d %s\r\n", a.status, http.StatusText(a.status))
	for k, vv := range a.header {
		for _, v := range vv {
			b = fmt.Appendf(b, "%s: %s\r\n", k, v)
		}
	}
	b = append(b, "\r\n"...)
	if hc.req.Method != http.MethodHead {
		b = append(b, a.body...)
	}
	hc.wr.buf = b
	return hc.wr.flush() == nil && goOn
}
