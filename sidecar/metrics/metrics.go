// Package metrics defines the proxy's Prometheus metrics with Linkerd's
// names and labels, registered on an injected registry, with bounded label
// cardinality.
package metrics

import (
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// Directions, the value of the direction label.
const (
	Inbound  = "inbound"
	Outbound = "outbound"
)

// Peers, the value of the peer label on tcp_* metrics: src is the accepted
// connection, dst the one the proxy dialled.
const (
	PeerSrc = "src"
	PeerDst = "dst"
)

// Overflow replaces a target_addr or authority value once a direction has
// seen MaxTargets distinct ones, so a scan of many addresses cannot grow
// the metric set without bound.
const Overflow = "overflow"

// LatencyBucketsMs are Linkerd's response_latency_ms buckets.
var latencyBucketsMs = []float64{1, 2, 3, 4, 5, 10, 20, 30, 40, 50, 100, 200, 300, 400, 500,
	1000, 2000, 3000, 4000, 5000, 10000, 20000, 30000, 40000, 50000}

// Metrics holds every proxy metric. Create it with New.
type Metrics struct {
	maxTargets int
	authz      authzMetrics
	portsMu    sync.RWMutex
	ports      map[uint16]string // srv_port label values

	requests  *prometheus.CounterVec
	responses *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	tcpOpen   *prometheus.CounterVec
	tcpClose  *prometheus.CounterVec
	tcpConns  *prometheus.GaugeVec
	tcpRead   *prometheus.CounterVec
	tcpWrite  *prometheus.CounterVec
	probes    prometheus.Counter
	refused   *prometheus.CounterVec
	limits    *prometheus.CounterVec
	resent    *prometheus.CounterVec
	// The outbound route families (routes.go), and the route series held
	// by the route tables in use.
	httpRoutes, grpcRoutes *routeFamilies
	routesMu               sync.Mutex
	routesHeld             map[string]*heldRoute

	mu   sync.Mutex
	seen map[string]map[string]struct{} // label kind+direction → values
}

// New registers the metrics on reg. maxTargets bounds the distinct
// target_addr and authority values per direction (each; beyond it they
// become "overflow").
func New(reg prometheus.Registerer, maxTargets int) *Metrics {
	http := []string{"direction", "target_addr", "authority", "tls", "client_id", "server_id", "dst_cluster"}
	tcp := []string{"direction", "target_addr", "peer", "tls", "client_id", "server_id"}
	m := &Metrics{
		maxTargets: maxTargets,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "request_total", Help: "HTTP requests the proxy received.",
		}, http),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "response_total", Help: "HTTP responses the proxy completed.",
		}, append(http, "status_code", "classification", "grpc_status", "error")),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "response_latency_ms", Help: "Time from request headers to response headers, in milliseconds.",
			Buckets: latencyBucketsMs,
		}, append(http, "status_code")),
		tcpOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tcp_open_total", Help: "TCP connections opened.",
		}, tcp),
		tcpClose: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tcp_close_total", Help: "TCP connections closed.",
		}, append(tcp, "classification")),
		tcpConns: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "tcp_open_connections", Help: "TCP connections currently open.",
		}, tcp),
		tcpRead: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tcp_read_bytes_total", Help: "Bytes the proxy read from the peer.",
		}, tcp),
		tcpWrite: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tcp_write_bytes_total", Help: "Bytes the proxy wrote to the peer.",
		}, tcp),
		probes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "redirect_probe_total", Help: "Connections to the redirect probe port that arrived through the inbound REDIRECT rule.",
		}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "inbound_refused_total", Help: "Inbound connections closed before forwarding: plaintext under the mtls policy, a failed mesh TLS handshake, or an original destination that is not the pod's.",
		}, []string{"reason"}),
		limits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "limit_exceeded_total", Help: "Times a resource limit or timeout of the proxy fired, by direction and limit.",
		}, []string{"direction", "limit"}),
		resent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "request_resent_total", Help: "Requests sent again because they reached no server (connection refused or reset before the request was written, or an idempotent request before any response byte), by direction.",
		}, []string{"direction"}),
		httpRoutes: newRouteFamilies("http", "http_status"),
		grpcRoutes: newRouteFamilies("grpc", "grpc_status"),
		routesHeld: map[string]*heldRoute{},
		seen:       map[string]map[string]struct{}{},
	}
	reg.MustRegister(m.requests, m.responses, m.latency, m.tcpOpen, m.tcpClose, m.tcpConns, m.tcpRead, m.tcpWrite, m.probes, m.refused, m.limits)
	reg.MustRegister(m.resent)
	m.authz = newAuthzMetrics()
	m.ports = map[uint16]string{}
	reg.MustRegister(m.authz.collectors()...)
	reg.MustRegister(m.httpRoutes.collectors()...)
	reg.MustRegister(m.grpcRoutes.collectors()...)
	return m
}

// RedirectProbe counts a connection that reached the probe port through
// the inbound redirect.
func (m *Metrics) RedirectProbe() { m.probes.Inc() }

// Reasons of inbound_refused_total.
const (
	RefusedPlaintext = "plaintext"     // not mesh mTLS, and the inbound policy is mtls
	RefusedHandshake = "tls-handshake" // offered our ALPN but the handshake failed
	// RefusedNotLocal: redirected to the inbound port, but addressed to
	// none of the pod's own addresses; forwarding it would make the proxy
	// a relay.
	RefusedNotLocal = "not-pod-address"
)

// Limits, the values of limit_exceeded_total's limit label: each is a
// PLEXUS_PROXY_* setting (sidecar/README.md).
const (
	LimitConnections     = "connections"       // a new connection over the per-direction cap was closed
	LimitRequestBodyIdle = "request-body-idle" // a request body made no progress in time
	LimitResponseHeaders = "response-headers"  // the upstream sent no response headers in time
	LimitWriteStall      = "write-stall"       // a peer read nothing of what the proxy wrote, in time
	LimitInformational   = "1xx-responses"     // the upstream sent too many interim responses
	LimitIdle            = "idle"              // a response body made no progress within the idle timeout
	LimitRetryBody       = "retry-body"        // a retry was not sent: the request body was larger than the proxy holds for replay
)

// LimitExceeded counts one firing of limit in direction.
func (m *Metrics) LimitExceeded(direction, limit string) {
	m.limits.WithLabelValues(direction, limit).Inc()
}

// Resent counts a request sent again because it reached no server.
func (m *Metrics) Resent(direction string) { m.resent.WithLabelValues(direction).Inc() }

// Refused counts an inbound connection closed for reason.
func (m *Metrics) Refused(reason string) { m.refused.WithLabelValues(reason).Inc() }

// bound returns v if it is already known for kind+direction or there is
// room for it, otherwise Overflow.
func (m *Metrics) bound(kind, direction, v string) string {
	key := kind + "/" + direction
	m.mu.Lock()
	defer m.mu.Unlock()
	set := m.seen[key]
	if set == nil {
		set = map[string]struct{}{}
		m.seen[key] = set
	}
	if _, ok := set[v]; ok {
		return v
	}
	if len(set) >= m.maxTargets {
		return Overflow
	}
	set[v] = struct{}{}
	return v
}

// Target returns the bounded target_addr label value for addr.
func (m *Metrics) Target(direction string, addr netip.AddrPort) string {
	return m.bound("target", direction, addr.String())
}

// Authority returns the bounded authority label value for a request's
// Host. Values that are not a plausible host[:port] become "invalid".
func (m *Metrics) Authority(direction, host string) string {
	if !validAuthority(host) {
		return "invalid"
	}
	return m.bound("authority", direction, host)
}

func validAuthority(h string) bool {
	if h == "" || len(h) > 260 {
		return false
	}
	for i := 0; i < len(h); i++ {
		c := h[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.', c == '-', c == ':', c == '[', c == ']', c == '_':
		default:
			return false
		}
	}
	return true
}

// TLS describes the mesh TLS of a connection or request for the labels
// tls, client_id (inbound: the client proxy's identity) and server_id
// (outbound: the server proxy's identity). The zero value is plaintext.
type TLS struct {
	On bool
	// PeerID is the peer's bounded SPIFFE ID label value (from PeerID), or "".
	PeerID string
	// ID is the peer's verified SPIFFE ID, whole: for authorization,
	// never a label value.
	ID string
}

// PeerID returns the bounded label value for a peer identity: at most
// maxTargets distinct values per direction, then "overflow".
func (m *Metrics) PeerID(direction string, id spiffe.ID) string {
	if id.IsZero() {
		return ""
	}
	return m.bound("id", direction, id.String())
}

// values returns the tls, client_id and server_id label values.
func (t TLS) values(direction string) (tls, client, server string) {
	tls = "false"
	if t.On {
		tls = "true"
	}
	if direction == Inbound {
		return tls, t.PeerID, ""
	}
	return tls, "", t.PeerID
}

// Request is the metric handle for one HTTP request.
type Request struct {
	m      *Metrics
	labels [7]string
	start  time.Time
	s      *Series
}

// Series remembers the labels and series of a connection's last request,
// so the next request like it (a keep-alive client repeating itself, the
// common case) skips bounding its labels and hashing them three times.
// One connection's requests use it one at a time; it is not shared.
type Series struct {
	dst       netip.AddrPort
	authority string
	tls       TLS
	cluster   string
	labels    [7]string
	requests  prometheus.Counter
	status    int
	latency   prometheus.Observer
	done      doneKey
	responses prometheus.Counter
}

type doneKey struct {
	status          int
	grpc, errReason string
	failed          bool
}

// StartRequest counts a request to the original destination dst with the
// Host authority and returns its handle. cluster is the linked cluster
// of the endpoint an outbound request goes to ("" for this cluster's;
// label dst_cluster). s, when not nil, caches the series of a
// connection's requests.
func (m *Metrics) StartRequest(direction string, dst netip.AddrPort, authority string, t TLS, cluster string, s *Series) Request {
	if s != nil && s.requests != nil && s.dst == dst && s.authority == authority && s.tls == t && s.cluster == cluster && s.labels[0] == direction {
		s.requests.Inc()
		return Request{m: m, labels: s.labels, start: time.Now(), s: s}
	}
	tls, client, server := t.values(direction)
	dstCluster := ""
	if cluster != "" {
		dstCluster = m.bound("cluster", direction, cluster)
	}
	r := Request{m: m, start: time.Now(), s: s,
		labels: [7]string{direction, m.Target(direction, dst), m.Authority(direction, authority), tls, client, server, dstCluster}}
	c := m.requests.WithLabelValues(r.labels[:]...)
	c.Inc()
	if s != nil {
		*s = Series{dst: dst, authority: authority, tls: t, cluster: cluster, labels: r.labels, requests: c}
	}
	return r
}

// Start is when the request started (StartRequest's clock read).
func (r Request) Start() time.Time { return r.start }

// Headers records response latency when response headers are ready.
func (r Request) Headers(status int) {
	ms := float64(time.Since(r.start)) / float64(time.Millisecond)
	if s := r.s; s != nil {
		if s.latency == nil || s.status != status {
			s.status, s.latency = status, r.m.latency.WithLabelValues(append(r.labels[:], statusLabel(status))...)
		}
		s.latency.Observe(ms)
		return
	}
	r.m.latency.WithLabelValues(append(r.labels[:], statusLabel(status))...).Observe(ms)
}

// Done counts the finished response. grpcStatus is "" for non-gRPC
// responses; errReason is "" unless the proxy failed the request or the
// response stream broke. Classification follows Linkerd: failure for 5xx,
// a non-zero grpc-status or a proxy error.
func (r Request) Done(status int, grpcStatus, errReason string) {
	r.done(status, grpcStatus, errReason, status >= 500 || (grpcStatus != "" && grpcStatus != "0"))
}

// DoneClassified is Done with the response's classification decided by
// the caller (a route's response classes): failed says whether the
// response counts as a failure; a proxy error always does.
func (r Request) DoneClassified(status int, grpcStatus, errReason string, failed bool) {
	r.done(status, grpcStatus, errReason, failed)
}

func (r Request) done(status int, grpcStatus, errReason string, failed bool) {
	key := doneKey{status, grpcStatus, errReason, failed}
	if s := r.s; s != nil && s.responses != nil && s.done == key {
		s.responses.Inc()
		return
	}
	class := "success"
	if failed || errReason != "" {
		class = "failure"
	}
	c := r.m.responses.WithLabelValues(append(r.labels[:], statusLabel(status), class, grpcLabel(grpcStatus), errReason)...)
	c.Inc()
	if s := r.s; s != nil {
		s.done, s.responses = key, c
	}
}

func statusLabel(s int) string {
	if s < 100 || s > 599 {
		return "other"
	}
	return strconv.Itoa(s)
}

// grpcLabel bounds grpc_status to the 17 defined codes.
func grpcLabel(s string) string {
	if s == "" {
		return ""
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 || n > 16 {
		return "other"
	}
	return s
}
