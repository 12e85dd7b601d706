// Package gateway is the multicluster gateway (gateway mode of the
// multicluster extension, multicluster/README.md): the one port of a
// cluster that linked clusters' proxies reach when its pods are not
// routable from theirs. A client proxy sends a PROXY protocol v2 header
// naming the pod it wants (mesh/passthrough), then its mesh mTLS session
// with that pod's proxy; the gateway reads the header, checks the pod is a
// meshed endpoint of a Service exported in gateway mode (Targets), connects
// and joins the two connections. It never terminates TLS: the pod's proxy
// sees the client's own certificate and its policy names the remote
// caller, unlike a gateway that ends the session and opens its own.
package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/mesh/connlimit"
	"github.com/plexus-mesh/plexus/mesh/passthrough"
)

// Defaults of Options.
const (
	DefaultHeaderTimeout  = 5 * time.Second
	DefaultConnectTimeout = 3 * time.Second
	// DefaultHalfCloseTimeout: a peer that half-closes and then stays
	// silent does not hold its slot for ever.
	DefaultHalfCloseTimeout = 30 * time.Second
	DefaultMaxConnections   = 10000
	DefaultPerSource        = 2000
)

// Options configure a Gateway.
type Options struct {
	// Allowed reports why the gateway may not connect to a destination
	// (Targets.Allowed); nil: it may.
	Allowed func(netip.AddrPort) error
	// Ready reports why the gateway cannot serve yet (Targets.Ready): a
	// health check is then refused. Nil: always ready.
	Ready func() error
	// Dial connects to a target (default: TCP).
	Dial func(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
	// HeaderTimeout bounds the wait for the header, ConnectTimeout the
	// connection to the target, HalfCloseTimeout a joined connection
	// once one direction has ended.
	HeaderTimeout, ConnectTimeout, HalfCloseTimeout time.Duration
	// MaxConnections bounds the connections held in all, PerSource those
	// from one address (every proxy of a linked cluster may come from one
	// masqueraded address: keep it high).
	MaxConnections, PerSource int
	Registry                  prometheus.Registerer
	Log                       *slog.Logger
}

// Gateway forwards connections whose header names an allowed target.
type Gateway struct {
	opts    Options
	limit   *connlimit.Limiter
	metrics *metrics
	conns   sync.WaitGroup
}

// New returns a Gateway; its metrics are registered with o.Registry.
func New(o Options) (*Gateway, error) {
	if o.Allowed == nil {
		return nil, errors.New("gateway: Options.Allowed is required")
	}
	if o.Dial == nil {
		var d net.Dialer
		o.Dial = func(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", dst.String())
		}
	}
	if o.HeaderTimeout <= 0 {
		o.HeaderTimeout = DefaultHeaderTimeout
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.HalfCloseTimeout <= 0 {
		o.HalfCloseTimeout = DefaultHalfCloseTimeout
	}
	if o.MaxConnections <= 0 {
		o.MaxConnections = DefaultMaxConnections
	}
	if o.PerSource <= 0 {
		o.PerSource = DefaultPerSource
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	return &Gateway{opts: o, limit: connlimit.New(o.MaxConnections, o.PerSource), metrics: m}, nil
}

// Serve accepts connections on ln until ctx ends, then closes ln and
// every connection it holds.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	ln = connlimit.Listener(ln, g.limit, func() { g.metrics.connections.WithLabelValues(resultLimit).Inc() })
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		ln.Close()
	}()
	defer g.conns.Wait()
	for {
		c, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors, say: the connections held end in
			// time, so wait rather than stop.
			g.opts.Log.Warn("accepting a connection failed; retrying", "error", err)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		g.conns.Add(1)
		go func() {
			defer g.conns.Done()
			g.handle(ctx, c)
		}()
	}
}

// The results a connection is counted under.
const (
	resultForwarded   = "forwarded"
	resultBadHeader   = "bad_header"
	resultRefused     = "refused"
	resultUnreachable = "unreachable"
	resultLimit       = "limit"
	resultHealth      = "health_check"
)

// handle serves one accepted connection.
func (g *Gateway) handle(ctx context.Context, c net.Conn) {
	defer c.Close()
	h, err := passthrough.Accept(c, g.opts.HeaderTimeout)
	if err != nil {
		g.metrics.connections.WithLabelValues(resultBadHeader).Inc()
		g.opts.Log.Debug("connection refused: bad header", "client", c.RemoteAddr(), "error", err)
		connlimit.ResetClose(c)
		return
	}
	src, dst := h.Src, h.Dst
	if h.Health {
		// A linked cluster's destination asks whether it may send here:
		// a clean close says yes, a reset no.
		g.metrics.connections.WithLabelValues(resultHealth).Inc()
		if g.opts.Ready != nil && g.opts.Ready() != nil {
			connlimit.ResetClose(c)
		}
		return
	}
	if err := g.opts.Allowed(dst); err != nil {
		g.metrics.connections.WithLabelValues(resultRefused).Inc()
		g.opts.Log.Info("connection refused", "client", c.RemoteAddr(), "source", src, "target", dst, "reason", err)
		connlimit.ResetClose(c)
		return
	}
	dctx, cancel := context.WithTimeout(ctx, g.opts.ConnectTimeout)
	up, err := g.opts.Dial(dctx, dst)
	cancel()
	if err != nil {
		g.metrics.connections.WithLabelValues(resultUnreachable).Inc()
		g.opts.Log.Info("target unreachable", "client", c.RemoteAddr(), "target", dst, "error", err)
		connlimit.ResetClose(c)
		return
	}
	defer up.Close()
	g.metrics.connections.WithLabelValues(resultForwarded).Inc()
	g.metrics.open.Inc()
	defer g.metrics.open.Dec()
	stop := context.AfterFunc(ctx, func() {
		c.Close()
		up.Close()
	})
	defer stop()
	join(netConn(c), up, g.opts.HalfCloseTimeout)
}

// netConn is the connection under c's limit slot: TCP to TCP, the copies
// are spliced in the kernel.
func netConn(c net.Conn) net.Conn {
	if u, ok := c.(interface{ NetConn() net.Conn }); ok {
		return u.NetConn()
	}
	return c
}

// join copies both ways until both directions have ended: the end of one
// half-closes the other side and gives the other direction halfClose to
// end; an error in either closes both.
func join(c, up net.Conn, halfClose time.Duration) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		pipe(c, up, halfClose)
	}()
	pipe(up, c, halfClose)
	<-done
}

// pipe copies from src to dst, then half-closes dst and bounds the other
// direction (dst's reads).
func pipe(dst, src net.Conn, halfClose time.Duration) {
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		src.Close()
		return
	}
	closeWrite(dst)
	_ = dst.SetReadDeadline(time.Now().Add(halfClose))
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
