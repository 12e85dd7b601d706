// Package proxy accepts redirected connections on the inbound and outbound
// listeners, recovers each one's original destination, detects its
// protocol and forwards it as HTTP or opaque TCP; it drains on shutdown.
package proxy

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/plexus-mesh/plexus/mesh/connlimit"
	"github.com/plexus-mesh/plexus/mesh/identity/mtls"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/balance"
	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/detect"
	"github.com/plexus-mesh/plexus/sidecar/discovery"
	"github.com/plexus-mesh/plexus/sidecar/forward"
	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
	"github.com/plexus-mesh/plexus/sidecar/localaddr"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/sidecar/origdst"
	"github.com/plexus-mesh/plexus/sidecar/tap"
)

// Options configure a Proxy.
type Options struct {
	Config  config.Config
	Metrics *metrics.Metrics
	Log     *slog.Logger
	// OrigDst recovers a connection's original destination; origdst.Get
	// when nil. Tests without iptables inject their own.
	OrigDst func(*net.TCPConn) (netip.AddrPort, error)
	// Dial opens upstream connections; a plain net.Dialer when nil.
	Dial func(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
	// DialInbound opens the inbound side's connections to the
	// application; when nil, a dialer bound to Config.InboundSource
	// (inbounddial.go), or Dial without one.
	DialInbound func(ctx context.Context, dst netip.AddrPort) (net.Conn, error)
	// Probe serves connections to Config.RedirectProbePort that arrive on
	// the inbound listener (the admin handler, in Run). Unused when the
	// port is 0.
	Probe http.Handler
	// ReadHeaderTimeout bounds how long an HTTP client may take to send
	// request headers (slowloris); DefaultReadHeaderTimeout when zero.
	ReadHeaderTimeout time.Duration
	// Certs is the workload's certificate source. With it, inbound
	// connections offering the mesh ALPN are terminated (mTLS) and
	// outbound connections to endpoints with an identity are encrypted.
	// nil: no identity, plaintext only.
	Certs mtls.CertSource
	// Tap is the tap sessions the request pipeline offers requests to;
	// nil: no tap.
	Tap *tap.Hub
	// Resolver routes outbound connections (per connection) and requests
	// (per request) to discovered endpoints; nil: original destination.
	Resolver Resolver
	// Inbound, when set, gives each inbound port's authorization policy
	// (inboundauthz.go); nil: every client is allowed.
	Inbound InboundPolicies
	// IsLocal reports whether an address is one of the pod's own; an
	// inbound connection to any other is refused. The network namespace's
	// interface addresses (localaddr.Set) when nil.
	IsLocal func(netip.Addr) bool
}

// Resolver picks the endpoint for one outbound connection or request, and
// knows the routes of each destination (discovery.Resolver).
type Resolver interface {
	// PickHTTP picks the endpoint of one request: among backend's
	// endpoints, or dst's.
	PickHTTP(ctx context.Context, dst netip.AddrPort, backend *routes.Backend) (discovery.Pick, error)
	// PickConn picks the endpoint of an opaque connection.
	PickConn(ctx context.Context, dst netip.AddrPort) (discovery.Pick, error)
	// Opaque reports whether dst's endpoints are marked opaque.
	Opaque(ctx context.Context, dst netip.AddrPort) bool
	// Policy returns dst's routes.
	Policy(ctx context.Context, dst netip.AddrPort) *routes.Table
	// Unavailable reports whether a route backend is known to have no
	// endpoint that can take a request (its route then fails over to its
	// others).
	Unavailable(backend *routes.Backend) bool
}

// Limits the proxy applies to HTTP clients and upstreams.
const (
	ConnectTimeout           = 5 * time.Second
	MaxHeaderBytes           = 64 << 10
	DefaultReadHeaderTimeout = 10 * time.Second
	PoolIdleTimeout          = 90 * time.Second
	MaxIdleConnsPerHost      = 64
)

// Proxy serves the inbound and outbound listeners. Create it with New.
type Proxy struct {
	opts     Options
	detector *detect.Detector
	joiner   *forward.Joiner
	dirs     map[string]*l7
	servers  []*l7 // every HTTP server, for Shutdown
	probe    *l7
	probed   atomic.Bool
	// probeLimit bounds the probe port's connections (which also hold
	// their inbound slots).
	probeLimit *connlimit.Limiter
	tlsConf    *tls.Config // inbound mesh mTLS; nil without identity
	slots      map[string]*connSlots
	inbound    inboundConns // live inbound connections, for revocation

	mu        sync.Mutex
	listeners map[net.Listener]struct{}
	conns     map[net.Conn]struct{} // accepted, not yet owned by an HTTP server; opaque upstreams
	closing   bool
	handlers  sync.WaitGroup
}

// l7 is the HTTP side of one direction: a server fed by detection.
type l7 struct {
	ln     *connListener
	server *http.Server
	proxy  *httpproxy.Proxy
	done   chan struct{}
}

// New returns a Proxy; call Serve for each listener.
func New(opts Options) *Proxy {
	if opts.OrigDst == nil {
		opts.OrigDst = origdst.Get
	}
	if opts.Dial == nil {
		d := &net.Dialer{}
		opts.Dial = func(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
			return d.DialContext(ctx, "tcp", dst.String())
		}
	}
	opts.Dial = sockioDial(opts.Dial)
	opts.DialInbound = inboundDial(opts)
	if opts.ReadHeaderTimeout == 0 {
		opts.ReadHeaderTimeout = DefaultReadHeaderTimeout
	}
	if opts.IsLocal == nil {
		opts.IsLocal = (&localaddr.Set{}).Has
	}
	p := &Proxy{
		opts:      opts,
		detector:  detect.New(opts.Config.DetectTimeout),
		joiner:    forward.New(opts.Config.IdleTimeout),
		dirs:      map[string]*l7{},
		listeners: map[net.Listener]struct{}{},
		conns:     map[net.Conn]struct{}{},
		slots:     map[string]*connSlots{},
	}
	if opts.Certs != nil {
		p.tlsConf = mtls.ServerConfig(opts.Certs)
	}
	cfg := opts.Config
	for _, dir := range []string{metrics.Inbound, metrics.Outbound} {
		p.slots[dir] = &connSlots{max: int64(cfg.MaxConnections)}
		hopts := httpproxy.Options{
			Direction:             dir,
			Metrics:               opts.Metrics,
			Log:                   opts.Log,
			Dial:                  p.dialer(dir),
			ConnectTimeout:        ConnectTimeout,
			IdleConnTimeout:       min(PoolIdleTimeout, cfg.IdleTimeout),
			MaxIdleConnsPerHost:   MaxIdleConnsPerHost,
			IdleTimeout:           cfg.IdleTimeout,
			IsolateClients:        dir == metrics.Inbound,
			Secure:                p.secure,
			ReadHeaderTimeout:     opts.ReadHeaderTimeout,
			ClientIdleTimeout:     cfg.IdleTimeout,
			BodyIdleTimeout:       cfg.BodyIdleTimeout,
			ResponseHeaderTimeout: cfg.ResponseHeaderTimeout,
			WriteTimeout:          cfg.WriteTimeout,
			MaxInformational:      cfg.MaxInformational,
			Tap:                   opts.Tap,
		}
		if dir == metrics.Outbound && opts.Resolver != nil {
			hopts.Balance = p.balance
			hopts.BackendUnavailable = opts.Resolver.Unavailable
			hopts.Routes = opts.Resolver.Policy
		}
		if dir == metrics.Inbound && opts.Inbound != nil {
			hopts.Authorize = p.authorizeRequest
		}
		hp := httpproxy.New(hopts)
		srv := &http.Server{
			Handler: hp,
			// OPTIONS * is for the destination to answer, not us.
			DisableGeneralOptionsHandler: true,
			ReadHeaderTimeout:            opts.ReadHeaderTimeout,
			IdleTimeout:                  opts.Config.IdleTimeout,
			MaxHeaderBytes:               MaxHeaderBytes,
			ErrorLog:                     slog.NewLogLogger(opts.Log.Handler(), slog.LevelDebug),
			Protocols:                    new(http.Protocols),
			ConnContext: func(ctx context.Context, c net.Conn) context.Context {
				if hc, ok := c.(*httpConn); ok {
					return httpproxy.WithTLS(httpproxy.WithDestination(ctx, hc.dst), hc.tls)
				}
				return ctx
			},
		}
		srv.Protocols.SetHTTP1(true)
		srv.Protocols.SetUnencryptedHTTP2(true)
		d := &l7{ln: newConnListener(), server: srv, proxy: hp, done: make(chan struct{})}
		p.start(d)
		p.dirs[dir] = d
	}
	if opts.Config.RedirectProbePort != 0 && opts.Probe != nil {
		p.probe = &l7{ln: newConnListener(), done: make(chan struct{}), server: adminServer(opts.Probe, cfg.AdminIdleTimeout, opts.Log)}
		p.probeLimit = connlimit.New(max(cfg.AdminMaxConnections, 1), adminMaxPerSource)
		p.start(p.probe)
	}
	return p
}

func (p *Proxy) start(d *l7) {
	p.servers = append(p.servers, d)
	go func() {
		defer close(d.done)
		d.server.Serve(d.ln)
	}()
}

// RedirectProbed reports whether a connection to the redirect probe port
// has arrived through the inbound listener, which proves the pod's inbound
// REDIRECT rule is in place.
func (p *Proxy) RedirectProbed() bool { return p.probed.Load() }

// Serve accepts connections on ln for direction (metrics.Inbound or
// metrics.Outbound) until ln is closed or Shutdown is called.
func (p *Proxy) Serve(ln net.Listener, direction string) error {
	if _, ok := p.dirs[direction]; !ok {
		return fmt.Errorf("proxy: unknown direction %q", direction)
	}
	p.mu.Lock()
	if p.closing {
		p.mu.Unlock()
		ln.Close()
		return http.ErrServerClosed
	}
	p.listeners[ln] = struct{}{}
	p.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// EMFILE and friends: back off instead of spinning.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			p.opts.Log.Warn("accept failed", "direction", direction, "err", err)
			time.Sleep(backoff)
			continue
		}
		backoff = 0
		tc, ok := c.(*net.TCPConn)
		if !ok {
			c.Close()
			continue
		}
		slots := p.slots[direction]
		if !slots.take() {
			// Over the cap: refuse at once (a reset, so the client does
			// not wait), and keep serving the connections already open.
			p.opts.Metrics.LimitExceeded(direction, metrics.LimitConnections)
			tc.SetLinger(0)
			tc.Close()
			continue
		}
		p.handlers.Add(1)
		go func() {
			defer p.handlers.Done()
			p.handle(tc, direction, sync.OnceFunc(slots.give))
		}()
	}
}

// EndpointsRemoved closes the outbound fast path's idle connections to
// endpoints that discovery removed (discovery.Options.EndpointsRemoved).
func (p *Proxy) EndpointsRemoved(addrs []netip.AddrPort) {
	if d := p.dirs[metrics.Outbound]; d != nil {
		d.proxy.CloseIdleTo(addrs)
	}
}

// load is a discovery pick as the balancer state of one request.
type load struct{ discovery.Pick }

// Done reports the request's outcome to failure accrual and releases the
// pick.
func (l *load) Done(o balance.Outcome) {
	l.Report(o)
	l.Pick.Done()
}

// rawConn is c's socket, or nil.
func rawConn(c *net.TCPConn) syscall.RawConn {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil
	}
	return raw
}

// balance chooses the endpoint of one outbound HTTP request: among the
// route backend's endpoints, or the original destination's when the
// backend is the destination's own Service (or there is none).
func (p *Proxy) balance(ctx context.Context, dst netip.AddrPort, backend *routes.Backend) (httpproxy.Endpoint, error) {
	pk, err := p.opts.Resolver.PickHTTP(ctx, dst, backend)
	switch {
	case errors.Is(err, discovery.ErrNoEndpoints), errors.Is(err, discovery.ErrUnknownService):
		return httpproxy.Endpoint{}, fmt.Errorf("%w: %w", httpproxy.ErrNoEndpoints, err)
	case errors.Is(err, discovery.ErrQueueFull):
		return httpproxy.Endpoint{}, fmt.Errorf("%w: %w", httpproxy.ErrQueueFull, err)
	case err != nil:
		return httpproxy.Endpoint{}, err
	}
	ep := httpproxy.Endpoint{Addr: pk.Addr, Via: pk.Via, Cluster: pk.Labels["cluster"], Load: &load{pk}}
	if p.opts.Certs != nil {
		ep.Identity = pk.Identity
	}
	return ep, nil
}
