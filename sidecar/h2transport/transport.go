// Package h2transport is the proxy's HTTP/2 client: prior-knowledge
// HTTP/2 over connections the caller dials (plaintext, or the mesh's
// mTLS), as an http.RoundTripper.
//
// It does what a proxy's upstream side needs and no more (no push, no
// compression, no proxies, no default headers), and it writes the way a
// relay should: frames are buffered per connection and one goroutine per
// connection flushes them whenever it finds nothing more queued. Whatever
// a request makes ready at once (HEADERS, its DATA, END_STREAM) leaves in
// one write, and nothing waits for a later frame: the flusher runs as soon
// as the goroutines producing frames stop to wait for anything.
//
// The frames are read and written by golang.org/x/net/http2's Framer and
// the header blocks coded by its hpack package; this package holds the
// connection and stream state around them (RFC 9113 §5, §6.9).
package h2transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// Transport is an HTTP/2 client connection pool, keyed by the request
// URL's host. Its zero value is not usable: set Dial.
type Transport struct {
	// Dial opens a connection to addr (host:port) for the request whose
	// context is ctx.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
	// IdleConnTimeout closes a connection that carries no stream for this
	// long; 0: never.
	IdleConnTimeout time.Duration
	// MaxResponseHeaderBytes bounds a response's header list (and
	// trailers), as SETTINGS_MAX_HEADER_LIST_SIZE; 0: 64 KiB.
	MaxResponseHeaderBytes int64
	// WriteTimeout closes a connection whose peer takes longer than this
	// to accept a write; 0: no limit.
	WriteTimeout time.Duration

	mu    sync.Mutex
	conns map[string][]*conn // by address
	dials map[string]*dialCall
}

// dialCall is a connection being dialed, which requests to the same
// address wait for rather than each dialing its own.
type dialCall struct {
	done chan struct{}
	c    *conn
	err  error
}

// maxUnprocessedRetries bounds how often a request the server refused
// unprocessed (a GOAWAY that raced it, REFUSED_STREAM) is sent again on
// another connection.
const maxUnprocessedRetries = 3

// RoundTrip sends req on a connection to req.URL.Host and returns the
// response once its headers arrive. A request the server did not process
// (RFC 9113 §8.7) is sent again on a new connection, its body from
// req.GetBody when some of it was read.
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL == nil || req.URL.Host == "" {
		return nil, errors.New("h2transport: request has no host")
	}
	for try := 0; ; try++ {
		c, err := t.conn(req.Context(), req.URL.Host)
		if err != nil {
			return nil, err
		}
		res, err := c.roundTrip(req)
		var ue *unprocessedError
		if err == nil || !errors.As(err, &ue) {
			return res, err
		}
		if try == maxUnprocessedRetries || ue.bodyRead && req.GetBody == nil {
			closeBody(req) // RoundTrip closes the body, errors included
			return nil, err
		}
		if ue.bodyRead {
			body, gerr := req.GetBody()
			if gerr != nil {
				closeBody(req)
				return nil, err
			}
			req = req.Clone(req.Context())
			req.Body = body
		}
	}
}

// conn returns a connection to addr that can take a new stream, dialing
// one when none can.
func (t *Transport) conn(ctx context.Context, addr string) (*conn, error) {
	for {
		t.mu.Lock()
		for _, c := range t.conns[addr] {
			if c.reserve() {
				t.mu.Unlock()
				return c, nil
			}
		}
		d := t.dials[addr]
		if d == nil {
			d = &dialCall{done: make(chan struct{})}
			if t.dials == nil {
				t.dials = map[string]*dialCall{}
			}
			t.dials[addr] = d
			t.mu.Unlock()
			d.c, d.err = t.dial(ctx, addr)
			t.mu.Lock()
			delete(t.dials, addr)
			if d.err == nil && d.c.usable() { // (it may have closed already)
				if t.conns == nil {
					t.conns = map[string][]*conn{}
				}
				t.conns[addr] = append(t.conns[addr], d.c)
			}
			close(d.done)
			t.mu.Unlock()
			if d.err != nil {
				return nil, d.err
			}
			if d.c.reserve() {
				return d.c, nil
			}
			if d.c.takesNoStreams() {
				err := fmt.Errorf("h2transport: %s takes no streams (SETTINGS_MAX_CONCURRENT_STREAMS 0)", addr)
				d.c.close(err)
				return nil, err
			}
			continue
		}
		t.mu.Unlock()
		select {
		case <-d.done:
			if d.err != nil && (ctx.Err() != nil || !isContextError(d.err)) {
				return nil, d.err
			}
			// Else the dial ended with its own caller's context, not
			// this one's: go again.
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (t *Transport) dial(ctx context.Context, addr string) (*conn, error) {
	nc, err := t.Dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	c, err := newConn(ctx, t, addr, nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

func isContextError(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

// forget drops c from the pool (it closed, or takes no new streams).
func (t *Transport) forget(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	cs := t.conns[c.addr]
	for i, x := range cs {
		if x == c {
			cs = append(cs[:i:i], cs[i+1:]...)
			break
		}
	}
	if len(cs) == 0 {
		delete(t.conns, c.addr)
	} else {
		t.conns[c.addr] = cs
	}
}

// CloseIdleConnections closes the connections that carry no stream.
func (t *Transport) CloseIdleConnections() { t.closeIdle(func(string) bool { return true }) }

// CloseIdleTo closes the idle connections to addrs.
func (t *Transport) CloseIdleTo(addrs []netip.AddrPort) {
	t.closeIdle(func(a string) bool {
		for _, ap := range addrs {
			if ap.String() == a {
				return true
			}
		}
		return false
	})
}

func (t *Transport) closeIdle(match func(addr string) bool) {
	t.mu.Lock()
	var idle []*conn
	for addr, cs := range t.conns {
		if match(addr) {
			idle = append(idle, cs...)
		}
	}
	t.mu.Unlock()
	for _, c := range idle {
		c.closeIfIdle()
	}
}

// unprocessedError is a request the server did not process: it may be
// sent again (bodyRead: some of its body was consumed).
type unprocessedError struct {
	err      error
	bodyRead bool
}

func (e *unprocessedError) Error() string { return e.err.Error() }
func (e *unprocessedError) Unwrap() error { return e.err }
