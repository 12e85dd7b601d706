package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/sidecar/replay"
)

// h1conn is one client connection served by the fast path.
type h1conn struct {
	p    *Proxy
	c    net.Conn
	dst  netip.AddrPort
	tls  metrics.TLS
	rd   *h1reader
	wr   h1writer
	idle atomic.Bool              // waiting for the next request
	up   atomic.Pointer[upstream] // in use, for Shutdown to cut
}

// h1conns tracks the fast path's client connections for Shutdown.
type h1conns struct {
	mu       sync.Mutex
	set      map[*h1conn]struct{}
	draining atomic.Bool
}

func (s *h1conns) add(hc *h1conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining.Load() {
		return false
	}
	if s.set == nil {
		s.set = map[*h1conn]struct{}{}
	}
	s.set[hc] = struct{}{}
	return true
}

func (s *h1conns) remove(hc *h1conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.set, hc)
}

// ServeHTTP1 serves the HTTP/1.1 requests a client sends on c to dst, one
// at a time, until the client closes, a timeout or error, or Shutdown.
// The first request the fast path does not handle (see reqHead.plain)
// passes to handoff with the rest of the connection, every byte already
// read replayed first. t is the mesh TLS c arrived with.
func (p *Proxy) ServeHTTP1(c net.Conn, dst netip.AddrPort, t metrics.TLS, handoff func(net.Conn)) {
	hc := &h1conn{p: p, c: c, dst: dst, tls: t, rd: newReader(c, h1ReadBuf), wr: h1writer{c: c}}
	if !p.h1conns.add(hc) {
		c.Close()
		return
	}
	defer p.h1conns.remove(hc)
	for {
		ok, handOff := hc.next()
		if handOff {
			c.SetReadDeadline(time.Time{})
			handoff(&replay.Conn{Conn: c, Data: append([]byte(nil), hc.rd.buffered()...)})
			return
		}
		if !ok {
			c.Close()
			return
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
			return false, false
		}
		if o.ClientIdleTimeout > 0 {
			hc.c.SetReadDeadline(time.Now().Add(o.ClientIdleTimeout))
		}
		err := hc.rd.fill(h1ReadBuf)
		hc.idle.Store(false)
		if err != nil {
			return false, false
		}
	}
	if headEnd(hc.rd.buffered()) < 0 && o.ReadHeaderTimeout > 0 {
		hc.c.SetReadDeadline(time.Now().Add(o.ReadHeaderTimeout))
	}
	raw, err := hc.rd.head(h1ReadBuf)
	if errors.Is(err, errHeadTooLarge) {
		return false, true
	}
	if err != nil {
		return false, false
	}
	req := parseRequest(raw)
	if !req.plain {
		return false, true
	}
	if req.hasBody() {
		hc.c.SetReadDeadline(time.Time{}) // a body may take its time, as under net/http
	}
	return hc.forward(&req), false
}

// bodyBuffered reports whether the request's whole body (if any) is
// already in the read buffer after its head; such a request can be sent
// again, and skipped without reading.
func (hc *h1conn) bodyBuffered(req *reqHead) bool {
	return !req.hasBody() || (!req.chunked && int64(len(hc.rd.buffered())-len(req.raw)) >= req.contentLength)
}

// forward sends one request upstream and relays the response; it reports
// whether the client connection may carry another request.
func (hc *h1conn) forward(req *reqHead) bool {
	p, m, dir := hc.p, hc.p.opts.Metrics, hc.p.opts.Direction
	rt := Route{Addr: hc.dst}
	var routeErr error
	if p.opts.Route != nil {
		rt, routeErr = p.opts.Route(context.Background(), hc.dst)
		if rt.Done != nil {
			defer rt.Done()
		}
	}
	tl := hc.tls
	if !rt.Identity.IsZero() {
		tl = metrics.TLS{On: true, PeerID: m.PeerID(dir, rt.Identity)}
	}
	rec := m.StartRequest(dir, m.Target(dir, hc.dst), m.Authority(dir, string(req.host)), tl)
	replayable := hc.bodyBuffered(req)
	if routeErr != nil {
		return hc.fail(req, rec, routeErr, replayable)
	}
	key := poolKey{addr: rt.Addr, id: rt.Identity}
	for attempt := 0; ; attempt++ {
		var up *upstream
		if attempt == 0 {
			// A retry always dials: the pool may hold more connections
			// the same server closed (a restart closes them all).
			up = p.h1pool.get(key)
		}
		if up == nil {
			var err error
			if up, err = p.dialUpstream(rt); err != nil {
				return hc.fail(req, rec, err, replayable)
			}
		}
		hc.up.Store(up)
		res, err := hc.exchange(up, req, replayable)
		if err != nil {
			hc.up.Store(nil)
			up.close()
			var se *srcError
			if errors.As(err, &se) {
				// The client broke off its own request body.
				rec.Done(499, "", ReasonClientGone)
				return false
			}
			if attempt == 0 && up.reused && up.rd.got == 0 && replayable &&
				(req.idempotent() || errors.Is(err, errNotSent)) {
				p.opts.Log.Debug("pooled connection failed before answering; sending again", "direction", dir, "endpoint", rt.Addr, "err", err)
				continue // a pooled connection its server had closed
			}
			return hc.fail(req, rec, err, replayable)
		}
		return hc.relay(up, key, req, res, rec)
	}
}

// errNotSent marks a request whose head could not be written upstream at
// all: safe to send again whatever its method.
var errNotSent = errors.New("request not sent")

// exchange writes the request (head and body) to up and reads the
// response head, relaying any interim (1xx) responses to the client. A
// replayable request stays in the client buffer until the exchange
// succeeds, so it can be sent again.
func (hc *h1conn) exchange(up *upstream, req *reqHead, replayable bool) (resHead, error) {
	up.wr.buf = req.appendUpstream(up.wr.buf[:0])
	if replayable {
		n := len(req.raw)
		if req.contentLength > 0 {
			up.wr.buf = append(up.wr.buf, hc.rd.buffered()[n:n+int(req.contentLength)]...)
		}
		if err := up.wr.flush(); err != nil {
			return resHead{}, errors.Join(errNotSent, err)
		}
	} else {
		hc.rd.discard(len(req.raw))
		cp := copier{r: hc.rd, w: &up.wr}
		buf := hc.p.bufs.Get().(*[32 << 10]byte)
		cp.buf = buf[:]
		var err error
		if req.chunked {
			err = cp.copyChunked()
		} else {
			err = cp.copyN(req.contentLength)
		}
		if err == nil {
			if err = up.wr.flush(); err != nil {
				err = &dstError{err}
			}
		}
		hc.p.bufs.Put(buf)
		if err != nil {
			return resHead{}, err
		}
	}
	for {
		raw, err := up.rd.head(maxResponseHead)
		if err != nil {
			return resHead{}, err
		}
		res, err := parseResponse(raw)
		if err != nil {
			return resHead{}, err
		}
		if res.status >= 200 {
			if replayable {
				hc.rd.discard(req.length())
			}
			return res, nil
		}
		if res.status == http.StatusSwitchingProtocols {
			return resHead{}, errUpgrade
		}
		// 1xx interim response (e.g. 103 Early Hints): relay it and wait
		// for the final one.
		hc.wr.buf = res.appendClient(hc.wr.buf[:0], req.method, false)
		up.rd.discard(len(raw))
		if err := hc.wr.flush(); err != nil {
			return resHead{}, &srcError{err}
		}
	}
}

// relay writes the response head and body to the client, and returns
// the upstream connection to the pool (key) when it can carry another
// request. It reports whether the client connection may go on.
func (hc *h1conn) relay(up *upstream, key poolKey, req *reqHead, res resHead, rec metrics.Request) bool {
	p := hc.p
	rec.Headers(res.status)
	closing := req.conn.close || res.untilClose(req.method) || p.h1conns.draining.Load()
	hc.wr.buf = res.appendClient(hc.wr.buf[:0], req.method, closing)
	up.rd.discard(len(res.raw))
	buf := p.bufs.Get().(*[32 << 10]byte)
	defer p.bufs.Put(buf)
	cp := copier{r: up.rd, w: &hc.wr, buf: buf[:]}
	var err error
	switch {
	case res.bodyless(req.method):
	case res.chunked:
		err = cp.copyChunked()
	case res.contentLength >= 0:
		err = cp.copyN(res.contentLength)
	default:
		err = cp.copyUntilEOF()
	}
	hc.up.Store(nil)
	grpc := string(res.grpcStatus)
	if err != nil {
		up.close()
		reason := ReasonUpstreamReset
		var de *dstError
		if errors.As(err, &de) {
			reason = ReasonClientReset
		}
		p.opts.Log.Debug("response body aborted", "direction", p.opts.Direction, "dst", hc.dst, "reason", reason, "err", err)
		rec.Done(res.status, grpc, reason)
		// Closing the client without the rest of the body tells it the
		// response broke.
		return false
	}
	// The response is read in full, so the upstream connection is free
	// before the last write to the client: a client's next request finds
	// it in the pool.
	if res.reusable(req.method) && len(up.rd.buffered()) == 0 {
		p.h1pool.put(key, up)
	} else {
		up.close()
	}
	// Counted before the last write, as under net/http (whose handler
	// returns before the server flushes): whoever reads the metrics after
	// the response sees it.
	rec.Done(res.status, grpc, "")
	return hc.wr.flush() == nil && !closing
}

// fail answers a request the proxy could not forward, as Proxy.fail does
// for net/http. It reports whether the client connection may go on: only
// when the request, head and whole body, is still in the read buffer
// (buffered), where it is skipped.
func (hc *h1conn) fail(req *reqHead, rec metrics.Request, err error, buffered bool) bool {
	p := hc.p
	a := failure(err, req.grpc)
	p.opts.Log.Debug("request failed", "direction", p.opts.Direction, "host", string(req.host), "reason", a.reason, "err", err)
	if a.reason == ReasonClientGone {
		rec.Done(a.status, "", a.reason)
		return false
	}
	goOn := buffered && !req.conn.close && !p.h1conns.draining.Load()
	if goOn {
		hc.rd.discard(req.length())
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
	if string(req.method) != "HEAD" {
		b = append(b, a.body...)
	}
	hc.wr.buf = b
	rec.Headers(a.status)
	rec.Done(a.status, a.grpcStatus, a.reason)
	return hc.wr.flush() == nil && goOn
}

// Shutdown ends the fast path's client connections: idle ones at once,
// busy ones after their current response (sent with Connection: close).
// When ctx ends first, the rest are cut, upstreams included.
func (p *Proxy) Shutdown(ctx context.Context) {
	s := &p.h1conns
	s.draining.Store(true)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		s.mu.Lock()
		n := len(s.set)
		for hc := range s.set {
			if hc.idle.Load() {
				hc.c.SetReadDeadline(time.Unix(1, 0)) // wake its read; it sees draining
			}
		}
		s.mu.Unlock()
		if n == 0 {
			return
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			s.mu.Lock()
			for hc := range s.set {
				hc.c.Close()
				if u := hc.up.Load(); u != nil {
					u.close()
				}
			}
			s.mu.Unlock()
			return
		}
	}
}
