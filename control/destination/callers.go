package destination

// Callers: StreamInterceptor identifies the caller of every stream before
// its handler runs, refuses one that proves no mesh identity, and bounds
// the streams each caller has open at once.

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// Refusal reasons: the reason label of
// plexus_destination_refused_streams_total.
const (
	reasonNoCertificate   = "no_client_certificate"
	reasonInvalidIdentity = "invalid_identity"
	reasonTrustDomain     = "foreign_trust_domain"
	reasonIdentityLimit   = "identity_stream_limit"
	reasonLoopbackLimit   = "loopback_stream_limit"
	reasonAddressLimit    = "address_stream_limit"
	reasonNotOwnPod       = "not_own_pod"
)

// caller is who opened a stream: a verified mesh identity, else a peer on
// loopback, else (only when identities are not required) an address.
type caller struct {
	id       spiffe.ID
	loopback bool
	addr     string
}

func (c caller) String() string {
	switch {
	case !c.id.IsZero():
		return c.id.String()
	case c.loopback:
		return "a caller on loopback without a certificate"
	}
	return "the caller at " + c.addr + " without a certificate"
}

// StreamInterceptor returns the interceptor that a gRPC server serving s
// must install (grpc.ChainStreamInterceptor): every Destination RPC is a
// stream, and none is answered before its caller is known.
//
//   - A caller whose verified TLS client certificate names a Plexus SPIFFE
//     ID of s's trust domain is that identity (the certificate is
//     verified against the trust anchors in the TLS handshake). One that
//     names another trust domain, or no valid ID, is refused
//     (Unauthenticated).
//   - A caller without a certificate is refused (Unauthenticated) unless
//     it connects on loopback: only a process in destination's own pod
//     can, such as an operator's kubectl port-forward, which the API
//     server authorized (create on pods/portforward in the control plane
//     namespace). Without Config.RequireCallerIdentity (a server without
//     TLS), it is let in and counted by its address.
//   - One identity (all its proxies together) may have
//     MaxStreamsPerIdentity streams open, all callers on loopback together
//     MaxLoopbackStreams; more are refused (ResourceExhausted).
//
// Every refusal is counted in plexus_destination_refused_streams_total
// and logged (once a minute per caller and reason).
func (s *Server) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		rpc := rpcOfMethod(info.FullMethod)
		c, reason, err := s.identify(ss.Context())
		if err != nil {
			s.refuse(rpc, reason, c, err)
			return grpcError(err)
		}
		key, limit, reason, flag := "id:"+c.id.String(), s.cfg.MaxStreamsPerIdentity, reasonIdentityLimit, "--max-streams-per-identity"
		switch {
		case c.loopback:
			key, limit, reason, flag = "loopback", s.cfg.MaxLoopbackStreams, reasonLoopbackLimit, "--max-loopback-streams"
		case c.id.IsZero():
			key, reason = "addr:"+c.addr, reasonAddressLimit
		}
		release, ok := s.callers.acquire(key, limit)
		if !ok {
			err := &LimitError{Reason: fmt.Sprintf("%s has %d destination streams open, as many as it may (%s); this one is refused", c, limit, flag)}
			s.refuse(rpc, reason, c, err)
			return grpcError(err)
		}
		defer release()
		return handler(srv, ss)
	}
}

// identify names the caller of a stream, or why it is refused.
func (s *Server) identify(ctx context.Context) (caller, string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return caller{addr: "unknown"}, reasonNoCertificate, &UnauthenticatedError{Reason: "the caller's connection is unknown"}
	}
	addr := "unknown"
	if p.Addr != nil {
		addr = p.Addr.String()
	}
	loopback := isLoopback(addr)
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		addr = ap.Addr().Unmap().WithZone("").String() // callers are counted and logged by address, not connection
	}
	if info, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(info.State.PeerCertificates) > 0 {
		c := caller{addr: addr}
		if len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
			return c, reasonInvalidIdentity, &UnauthenticatedError{Reason: "the caller's client certificate was not verified against the trust anchors"}
		}
		id, err := spiffe.FromCert(info.State.VerifiedChains[0][0])
		if err != nil {
			return c, reasonInvalidIdentity, &UnauthenticatedError{Reason: fmt.Sprintf("the caller's client certificate names no mesh identity: %v", err)}
		}
		c.id = id
		if id.TrustDomain != s.cfg.TrustDomain {
			return c, reasonTrustDomain, &UnauthenticatedError{Reason: fmt.Sprintf("the caller %s is not of this mesh's trust domain %s", id, s.cfg.TrustDomain)}
		}
		return c, "", nil
	}
	if loopback {
		return caller{loopback: true, addr: addr}, "", nil
	}
	c := caller{addr: addr}
	if s.cfg.RequireCallerIdentity {
		return c, reasonNoCertificate, &UnauthenticatedError{Reason: "destination answers mesh proxies, which present the client certificate of their identity; " +
			"this caller presented none (an operator can reach destination through kubectl port-forward to its pod, without one)"}
	}
	return c, "", nil
}

// isLoopback: addr is an IP address and port on loopback (127.0.0.0/8,
// ::1, or 127.x mapped into IPv6). Anything else, an address that is not
// IP (a pipe, a unix socket) included, is not.
func isLoopback(addr string) bool {
	ap, err := netip.ParseAddrPort(addr)
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// refuse counts and logs a refused stream.
func (s *Server) refuse(rpc, reason string, c caller, err error) {
	s.metrics.refused.WithLabelValues(rpc, reason).Inc()
	s.refusals.warn(reason+" "+c.String(), "destination refused a stream", "rpc", rpc, "reason", reason, "caller", c.String(), "addr", c.addr, "err", err)
}

// rpcOfMethod is the rpc label of a full gRPC method name.
func rpcOfMethod(method string) string {
	switch method[strings.LastIndexByte(method, '/')+1:] {
	case "Get":
		return rpcGet
	case "GetProfile":
		return rpcGetProfile
	case "GetOutboundPolicy":
		return rpcGetOutboundPolicy
	case "GetInboundPolicy":
		return rpcGetInboundPolicy
	}
	return "other"
}

// streamCounts counts the open streams of each caller.
type streamCounts struct {
	mu   sync.Mutex
	open map[string]int
}

func newStreamCounts() *streamCounts { return &streamCounts{open: map[string]int{}} }

// acquire counts one more stream of key unless it has limit open; release
// uncounts it.
func (c *streamCounts) acquire(key string, limit int) (release func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.open[key] >= limit {
		return nil, false
	}
	c.open[key]++
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.open[key]--; c.open[key] <= 0 {
				delete(c.open, key)
			}
		})
	}, true
}

// everyLog logs a warning at most once per interval for each key, so a
// caller retrying a refused stream does not flood the log. Past 1000 keys
// it forgets them all.
type everyLog struct {
	log      logger
	interval time.Duration
	now      func() time.Time
	mu       sync.Mutex
	last     map[string]time.Time
}

// logger is the part of *slog.Logger everyLog uses.
type logger interface {
	Warn(msg string, args ...any)
}

func newEveryLog(log logger, interval time.Duration) *everyLog {
	return &everyLog{log: log, interval: interval, now: time.Now, last: map[string]time.Time{}}
}

func (l *everyLog) warn(key, msg string, args ...any) {
	now := l.now()
	l.mu.Lock()
	last, seen := l.last[key]
	logIt := !seen || now.Sub(last) >= l.interval
	if logIt {
		if len(l.last) >= 1000 {
			clear(l.last)
		}
		l.last[key] = now
	}
	l.mu.Unlock()
	if logIt {
		l.log.Warn(msg, args...)
	}
}
