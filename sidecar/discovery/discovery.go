// Package discovery asks the destination service where to send each
// original destination, keeps one cached subscription per destination
// while it is in use, and balances connections and requests over the
// endpoints it learns (least in-flight first).
package discovery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/mtls"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/policy/authz"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/balance"
)

// Defaults for Options.
const (
	DefaultFirstTimeout = time.Second
	DefaultIdleTimeout  = time.Minute
	DefaultMinBackoff   = 100 * time.Millisecond
	DefaultMaxBackoff   = 5 * time.Second
)

// ErrNoEndpoints is returned by Pick when destination knows the service
// (or IP) but it has no ready endpoint: the connection must fail, not fall
// back (the original destination, a ClusterIP, would go nowhere better).
var ErrNoEndpoints = errors.New("destination knows the service but it has no ready endpoints")

// Lookup results, the values of the result label of destination_lookups_total.
const (
	ResultEndpoints   = "endpoints"    // balanced over discovered endpoints
	ResultNotFound    = "not-found"    // unknown to destination: original destination
	ResultNoEndpoints = "no-endpoints" // known, nothing ready: failed
	ResultUnavailable = "unavailable"  // destination unreachable, nothing cached: original destination
)

// Options configure a Resolver.
type Options struct {
	Client       destinationpb.DestinationClient
	Log          *slog.Logger
	Registerer   prometheus.Registerer
	ContextToken string // sent as GetDestination.context_token
	// FirstTimeout bounds how long the first Pick for a destination waits
	// for destination's first answer before falling back.
	FirstTimeout time.Duration
	// IdleTimeout drops a subscription nobody picked from for this long
	// (and with nothing in flight).
	IdleTimeout time.Duration
	// MinBackoff and MaxBackoff bound the reconnect backoff.
	MinBackoff, MaxBackoff time.Duration
	// FailFastTimeout bounds how long a pick waits for an endpoint of a
	// service that has none available (DefaultFailFastTimeout when 0).
	FailFastTimeout time.Duration
	// Instrument, when set, is called with each compiled outbound policy
	// before any request uses it (the proxy attaches its metric series).
	Instrument func(*routes.Table)
	// Release, when set, is called with a table that a newer one replaced
	// or whose destination was dropped (the proxy frees its series).
	Release func(*routes.Table)
	// EndpointsRemoved, when set, is told of addresses that left an
	// endpoint set (the proxy closes its idle connections to them).
	EndpointsRemoved func([]netip.AddrPort)
	// PodNamespace and PodName name the proxy's own pod, whose inbound
	// policies it asks for.
	PodNamespace, PodName string
	// InboundChanged, when set, is told of each new inbound policy of a
	// port (the proxy re-checks that port's live connections).
	InboundChanged func(port uint16, p *authz.Policy)
	// Probe reaches an endpoint that stopped answering (probe.go); nil
	// opens and closes a TCP connection to it.
	Probe func(ctx context.Context, addr netip.AddrPort) error
}

// Endpoint is where to send a connection or request.
type Endpoint struct {
	Addr netip.AddrPort
	// Identity is the endpoint proxy's identity; zero when the endpoint is
	// not meshed (plaintext).
	Identity spiffe.ID
	// Opaque: the port is opaque, forward without protocol detection.
	Opaque bool
	Labels map[string]string
	// Via is the linked cluster's gateway that reaches Addr (gateway mode
	// of multicluster; mesh/passthrough); zero: Addr is dialled directly.
	Via netip.AddrPort
}

// DialAddr is where a connection to e goes first: Via, or Addr.
func (e Endpoint) DialAddr() netip.AddrPort {
	if e.Via.IsValid() {
		return e.Via
	}
	return e.Addr
}

// Pick is one chosen endpoint. Call Done when the request or connection
// using it ends.
type Pick struct {
	Endpoint
	// Fallback is set when destination had no answer for the original
	// destination (unknown to it, or unreachable with nothing cached):
	// Addr is then the original destination and Identity is zero.
	Fallback bool
	zoned    bool // a zone-aware pick: FirstByte feeds ep.typical
	ep       *endpoint
	s        *sub
	br       *balance.Breaker // with failure accrual on
	r        *Resolver        // probes the endpoint if it stops answering
	// h counts the request on the endpoint's balancer state: pending
	// until Done, its RTT sampled by FirstByte.
	h balance.Handle
}

// Keepalive of the stream to destination; the destination server permits
// pings this often (control/destinationcmd). ConnectTimeout bounds each
// attempt to connect to destination.
const (
	KeepaliveTime    = 30 * time.Second
	KeepaliveTimeout = 10 * time.Second
	ConnectTimeout   = 5 * time.Second
)

// Resolver is the cache of subscriptions. Create it with New; Close it.
type Resolver struct {
	opts    Options
	lookups *prometheus.CounterVec
	streams *prometheus.CounterVec
	subsG   prometheus.Gauge
	// failFast counts picks failed for want of an endpoint, by reason.
	failFast *prometheus.CounterVec
	// lookedUp is lookups' endpoints series, resolved once: it counts
	// every request.
	lookedUp prometheus.Counter
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	probing  sync.WaitGroup // probes of unresponsive endpoints (probe.go); Add under mu, never after closed

	// defaultTable is the policy of a destination without one.
	defaultTable *routes.Table

	mu       sync.RWMutex // read-locked by the lookups of every request
	closed   bool         // Close began
	subs     map[subKey]*sub
	policies map[netip.AddrPort]*policySub
	inbound  map[uint16]*inboundSub
	// inboundFull: MaxInboundPorts reached (warned once).
	inboundFull bool
}

// New returns a Resolver; its metrics are registered on opts.Registerer.
func New(opts Options) *Resolver {
	if opts.FirstTimeout <= 0 {
		opts.FirstTimeout = DefaultFirstTimeout
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = DefaultIdleTimeout
	}
	if opts.FailFastTimeout <= 0 {
		opts.FailFastTimeout = DefaultFailFastTimeout
	}
	if opts.Probe == nil {
		opts.Probe = dialProbe
	}
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = DefaultMinBackoff
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(DefaultMaxBackoff, opts.MinBackoff)
	}
	r := &Resolver{
		opts: opts,
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "destination_lookups_total", Help: "Destination lookups by result (endpoints, not-found, no-endpoints, unavailable).",
		}, []string{"result"}),
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "destination_stream_ends_total", Help: "Destination Get streams that ended, by cause (error or idle).",
		}, []string{"cause"}),
		subsG: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "destination_subscriptions", Help: "Destinations with an open subscription.",
		}),
		failFast: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "outbound_balancer_fail_fast_total",
			Help: "Requests and connections failed for want of an available endpoint, by reason (timeout: waited 3s; fail-fast: failed at once after such a wait; queue-full: 100 already waited).",
		}, []string{"reason"}),
		done:         make(chan struct{}),
		subs:         map[subKey]*sub{},
		policies:     map[netip.AddrPort]*policySub{},
		inbound:      map[uint16]*inboundSub{},
		defaultTable: routes.Default(),
	}
	r.lookedUp = r.lookups.WithLabelValues(ResultEndpoints)
	if opts.Instrument != nil {
		opts.Instrument(r.defaultTable)
	}
	opts.Registerer.MustRegister(r.lookups, r.streams, r.subsG, r.failFast, newBalancerCollector(r))
	r.ctx, r.cancel = context.WithCancel(context.Background())
	go r.janitor()
	return r
}

// Dial returns a gRPC connection to the destination service at addr over
// TLS 1.3, presenting src's certificate and requiring the server to prove
// serverID. It connects once src has a certificate: a handshake without
// one would fail and leave the connection in gRPC's reconnect backoff,
// seconds after the certificate came (a new pod's first requests to an
// undeclared port were denied for want of the policy meanwhile).
func Dial(addr string, src mtls.CertSource, serverID spiffe.ID) (*grpc.ClientConn, error) {
	cc, err := grpc.NewClient(addr,
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			if err := mtls.WaitForCertificate(ctx, src); err != nil {
				return nil, err
			}
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}),
		grpc.WithTransportCredentials(credentials.NewTLS(mtls.ClientConfig(src, serverID))),
		// A control plane that vanishes without a FIN (node lost) is
		// noticed within Time+Timeout, and the cache keeps serving.
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: KeepaliveTime, Timeout: KeepaliveTimeout}),
		// Then each reconnect lands on a random replica behind the
		// Service's ClusterIP, a dead one's among them until Kubernetes
		// removes it (~50 s after the node is lost): retry often (gRPC's
		// default backoff grows to 2 min) and give up on a silent one
		// after ConnectTimeout.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: DefaultMinBackoff, Multiplier: 1.6, Jitter: 0.2, MaxDelay: DefaultMaxBackoff},
			MinConnectTimeout: ConnectTimeout,
		}))
	if err != nil {
		return nil, fmt.Errorf("destination client for %s: %w", addr, err)
	}
	return cc, nil
}

// Close ends every subscription.
func (r *Resolver) Close() {
	r.mu.Lock()
	r.closed = true // no probe starts from here on (probe.go)
	r.mu.Unlock()
	r.cancel()
	<-r.done
	r.probing.Wait()
}

// Pick returns the endpoint to use for one HTTP request to dst, without
// failure accrual (PickHTTP with no backend). The first Pick for dst
// subscribes and waits up to FirstTimeout (or ctx) for destination's
// first answer. When the service exists without endpoints it waits for
// one as PickHTTP does.
func (r *Resolver) Pick(ctx context.Context, dst netip.AddrPort) (Pick, error) {
	return r.pick(ctx, subKey{addr: dst}, dst, pickOpts{})
}

// PickService returns the endpoint for one request to a route's backend
// Service, authority "<svc>.<ns>.svc.<cluster-domain>:<port>". There is
// no original destination to fall back to: a Service destination does
// not know, or cannot tell about, is an error (ErrNoEndpoints when known
// and empty).
func (r *Resolver) PickService(ctx context.Context, authority string) (Pick, error) {
	return r.pickService(ctx, authority, pickOpts{})
}

func (r *Resolver) pickService(ctx context.Context, authority string, o pickOpts) (Pick, error) {
	pk, err := r.pick(ctx, subKey{name: authority}, netip.AddrPort{}, o)
	if err == nil && pk.Fallback {
		return Pick{}, fmt.Errorf("backend %s: %w", authority, ErrUnknownService)
	}
	return pk, err
}

// Unavailable reports whether backend's Service has no endpoint that can
// take a request now: destination answered it with none (scaled to 0,
// withdrawn, unknown), or every one is marked down (it refused a
// connection or left a request unanswered past its silence limit, and
// has not been reached since: a linked cluster gone silent, a crashed
// Deployment). False for the original destination and while destination
// has not answered. A route passes over such a backend for its others
// (httpproxy.Options.BackendUnavailable). Lock-free: it runs on every
// request of a split.
func (r *Resolver) Unavailable(backend *routes.Backend) bool {
	if backend == nil || backend.Authority == "" {
		return false
	}
	s := r.subscription(subKey{name: backend.Authority})
	s.touch()
	if s.empty.Load() {
		return true
	}
	lbs := s.lbsNow.Load()
	if lbs == nil || len(*lbs) == 0 {
		return false
	}
	for _, lb := range *lbs {
		if !lb.Down() {
			return false // the first, mostly
		}
	}
	return true
}

// ErrUnknownService is returned by PickService when destination does not
// know the backend Service, or could not be asked.
var ErrUnknownService = errors.New("destination does not know the Service or is unreachable")

// subKey names a subscription: an original destination, or a Service
// name (PickService). A key costs no allocation per request.
type subKey struct {
	addr netip.AddrPort
	name string
}

// path is the key as a Get path.
func (k subKey) path() string {
	if k.name != "" {
		return k.name
	}
	return k.addr.String()
}

// monoBase anchors monoNow, the balancer's monotonic clock.
var monoBase = time.Now()

func monoNow() int64 { return int64(time.Since(monoBase)) }

// subscription returns the subscription of key, starting it if needed.
func (r *Resolver) subscription(key subKey) *sub {
	r.mu.RLock()
	s, ok := r.subs[key]
	r.mu.RUnlock()
	if ok {
		return s
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.subscriptionLocked(key)
}

// subscriptionLocked is subscription with r.mu held.
func (r *Resolver) subscriptionLocked(key subKey) *sub {
	if s, ok := r.subs[key]; ok {
		return s
	}
	ctx, cancel := context.WithCancel(r.ctx)
	s := &sub{dst: key.path(), ctx: ctx, first: make(chan struct{}), cancel: cancel, seen: time.Now().UnixNano()}
	r.subs[key] = s
	r.subsG.Inc()
	go r.follow(ctx, s)
	return s
}

// janitor drops subscriptions idle for IdleTimeout.
func (r *Resolver) janitor() {
	defer close(r.done)
	tick := time.NewTicker(max(r.opts.IdleTimeout/4, 10*time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now().UnixNano()
		r.mu.Lock()
		for dst, s := range r.subs {
			if s.used.Swap(false) {
				s.seen = now
			}
			if s.active.Load() == 0 && time.Duration(now-s.seen) > r.opts.IdleTimeout {
				s.cancel()
				delete(r.subs, dst)
				r.subsG.Dec()
				r.streams.WithLabelValues("idle").Inc()
			}
		}
		r.dropIdlePolicies(now)
		r.mu.Unlock()
	}
}

// follow keeps a Get stream open for s until ctx ends, reconnecting with
// jittered exponential backoff. Each new stream's first message is a
// snapshot that replaces the cached set.
func (r *Resolver) follow(ctx context.Context, s *sub) {
	r.keepStream(ctx, func(ctx context.Context) (bool, error) { return r.stream(ctx, s) }, func(err error, retryIn time.Duration) {
		r.streams.WithLabelValues("error").Inc()
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
		s.firstDone()
		r.opts.Log.Warn("destination stream ended; keeping the cached endpoints and reconnecting", "dst", s.dst, "retry_in", retryIn, "err", err)
	})
}

// stream runs one Get stream; got reports whether any message arrived.
func (r *Resolver) stream(ctx context.Context, s *sub) (got bool, err error) {
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := r.opts.Client.Get(sctx, &destinationpb.GetDestination{Path: s.dst, ContextToken: r.opts.ContextToken})
	if err != nil {
		return false, fmt.Errorf("get %s: %w", s.dst, err)
	}
	for {
		u, err := st.Recv()
		if err != nil {
			return got, fmt.Errorf("get %s: %w", s.dst, err)
		}
		removed := s.apply(u, !got)
		got = true
		if len(removed) > 0 && r.opts.EndpointsRemoved != nil {
			r.opts.EndpointsRemoved(removed)
		}
		s.firstDone()
	}
}
