package httpproxy

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"time"

	"github.com/plexus-mesh/plexus/mesh/policy/pathnorm"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/balance"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/sidecar/tap"
)

// Every HTTP request goes through one chain of stages, whichever engine
// received it: the HTTP/1.1 fast path (ServeHTTP1), or net/http's server
// for the HTTP/1 requests the fast path hands off and for HTTP/2
// (ServeHTTP). Each stage is written once, here:
//
//	route      which route rule applies, and which of its backends (routes.Table)
//	authorize  may this client make it                 (the port's inbound policy, Options.Authorize)
//	balance    which endpoint: discovery's pick, or the original destination
//	attempt    send it, response headers due by the deadline; send again (see below)
//	observe    metrics at request, response headers and end (tap plugs in here)
//
// A request is sent again for one of two reasons, decided in two places
// that nest:
//
//	re-send      no server can have acted on the attempt (retrySafe's
//	             rule: no connection, nothing written, or a pooled
//	             connection that broke under an idempotent request): the
//	             same request to another endpoint, at most maxResends
//	             times, whatever the route says (attempt, retrySafe,
//	             willResend; here)
//	route retry  the route's retry policy names the outcome (a status, a
//	             gRPC code, a per-attempt timeout), within its budget,
//	             with the body held for replay (serveRule, retryableAttempt;
//	             routed.go); each retry is an attempt, which may re-send
//
// The engines move bytes: they parse a Request, make one attempt when
// asked, and relay the response, or the answer the pipeline decided. The
// fast path hands a connection to net/http before routing its request
// when some rule of the destination needs more than a backend choice
// (routes.Table.Plain) or the path is to be forwarded in normal form, so
// every request is routed once, by the engine that serves it.

// exchange is one request's way through the stages.
type exchange struct {
	p        *Proxy
	req      *Request
	endpoint Endpoint
	rec      metrics.Request
	// headerTimeout is how long after the request was sent its response
	// headers are due; zero: no limit.
	headerTimeout time.Duration
	attempts      int

	// What the route stage decided (rule nil: no routes apply).
	routed   bool
	routeErr error
	rule     *routes.Rule
	match    string // the path prefix the rule matched, for URLRewrite
	backend  *routes.Backend
	start    time.Time
	// attemptStart is when the current attempt was sent, for the backend
	// metrics; attemptOpen, that its end is not recorded yet.
	attemptStart time.Time
	attemptOpen  bool
	// failed holds the endpoints a re-send must avoid.
	failed [maxResends]netip.AddrPort
	// reqCtx carries the route's request timeout, when it has one;
	// attemptCtx, the current attempt's (response or per-attempt).
	reqCtx, attemptCtx context.Context
	// outcome is the verdict on the current attempt's endpoint, told to
	// its Load when the attempt ends (outcome.go).
	outcome balance.Outcome
	// tap is the request's tap sessions; nil: none watches (tap.go).
	tap *tap.Tapped
	// bodyBytes counts the response body bytes relayed, for the tap.
	bodyBytes int64
}

// route runs the route stage: which rule of the destination's routes
// applies and which backend takes the request.
//
// It first puts the request's path in normal form (pathnorm), which is
// what routes, policy and the tap see and what is forwarded; a path
// badly encoded, or ambiguous where the routes tell paths apart, is
// refused (400 invalid-path).
func (p *Proxy) route(ctx context.Context, x *exchange, req *Request) {
	if x.normalize(p, req) {
		x.matchRule(p.table(ctx, req.Dst))
	}
}

// table is the route table of requests to dst; nil without routes.
func (p *Proxy) table(ctx context.Context, dst netip.AddrPort) *routes.Table {
	if p.opts.Routes == nil {
		return nil
	}
	return p.opts.Routes(ctx, dst)
}

// normalize starts x as req's exchange, routed, and puts req's path in
// normal form; false (x.routeErr set) when the path is badly encoded.
// The HTTP/1 fast path runs normalize and matchRule itself, to hand requests
// the net/http engine must serve over before routing them.
func (x *exchange) normalize(p *Proxy, req *Request) bool {
	*x = exchange{p: p, req: req, endpoint: Endpoint{Addr: req.Dst}, routed: true}
	norm, err := pathnorm.Target(req.Path)
	if err != nil {
		x.routeErr = invalidPath(pathnorm.InvalidEncoding)
		return false
	}
	req.Path = norm
	return true
}

// matchRule finds the rule of t (nil: none, the original destination) that
// applies to x's request and picks its backend.
func (x *exchange) matchRule(t *routes.Table) {
	if t == nil {
		return
	}
	if t.PathSensitive() {
		if why := pathnorm.Ambiguous(x.req.Path); why != "" {
			x.routeErr = invalidPath(why)
			return
		}
	}
	rq := x.req.Route()
	rule, ok := t.Match(&rq)
	if !ok {
		x.routeErr = errNoRoute
		return
	}
	x.rule, x.match = rule, rq.MatchedPrefix
	if rule.Redirects() {
		return // answered by serveRule; no backend
	}
	x.routeErr = x.pickBackend()
}

// pickBackend chooses the rule's backend for the next attempt: by weight,
// passing over a backend with nothing behind it for the others that have
// something (failover), when the rule has others.
func (x *exchange) pickBackend() error {
	b := x.rule.PickBackend(rand.Uint64())
	if empty := x.p.opts.BackendUnavailable; b != nil && len(x.rule.Backends) > 1 && empty != nil && empty(b) {
		if alt := x.rule.PickBackendWhere(rand.Uint64(), func(c *routes.Backend) bool { return c.Failure == "" && !empty(c) }); alt != nil {
			b = alt
		}
	}
	x.backend = b
	switch {
	case b == nil:
		return &routeError{status: http.StatusInternalServerError, reason: ReasonNoBackend,
			msg: "the route has no usable backend"}
	case b.Failure != "":
		return &routeError{status: http.StatusInternalServerError, reason: ReasonNoBackend, msg: b.Failure}
	}
	return nil
}

// plain reports whether the request needs nothing the fast path lacks: no
// rule, or a rule that only chooses a backend.
func (x *exchange) plain() bool { return x.rule == nil || x.rule.Plain }

// begin runs route (unless the engine ran it), authorize and balance, and
// starts the metrics (with the series cache of the request's connection,
// when it has one). A non-nil error is the reason the request cannot be
// sent; answer it with x.fail. x.end must be called either way.
func (p *Proxy) begin(ctx context.Context, x *exchange, req *Request, series *metrics.Series) error {
	if !x.routed || x.req != req {
		p.route(ctx, x, req)
	}
	m, dir := p.opts.Metrics, req.Direction
	err := x.routeErr
	if err == nil && p.opts.Authorize != nil {
		switch d := p.opts.Authorize(req); {
		case d.InvalidPath != "":
			err = invalidPath(d.InvalidPath)
		case d.NoRoute:
			err = errNoRoute
		case !d.Allowed:
			err = errUnauthorized
		case d.RateLimited:
			err = errRateLimited
		}
	}
	if err == nil && (x.rule == nil || !x.rule.Redirects()) {
		err = x.balance(ctx)
	}
	tl := req.TLS
	if !x.endpoint.Identity.IsZero() {
		tl = metrics.TLS{On: true, PeerID: m.PeerID(dir, x.endpoint.Identity)}
	}
	x.rec = m.StartRequest(dir, req.Dst, req.Authority, tl, x.endpoint.Cluster, series)
	x.start = x.rec.Start() // one clock read for every metric of the request
	x.tapStart()
	if t := p.opts.ResponseHeaderTimeout; t > 0 && !req.GRPC {
		// gRPC carries its own deadline (grpc-timeout), and a server
		// stream may rightly send no headers for a long time.
		x.headerTimeout = t
	}
	return err
}

// balance chooses the endpoint of the next attempt, among the chosen
// backend's endpoints.
func (x *exchange) balance(ctx context.Context) error {
	if x.p.opts.Balance == nil {
		return nil
	}
	x.end()
	var err error
	x.endpoint, err = x.p.opts.Balance(ctx, x.req.Dst, x.backend)
	return err
}

// attempt calls send until it succeeds or the retry rule says stop; n is
// the attempt's number, from 0.
//
// A re-send goes to another endpoint when the balancer has one: the
// failed one may be going away (a rolling update).
func (x *exchange) attempt(send func(n int) error) error {
	for {
		x.sent()
		err := send(x.attempts)
		x.attempts++
		if err == nil || !x.retrySafe(err) {
			return err
		}
		x.p.opts.Log.Debug("the request reached no server; sending it again",
			"direction", x.req.Direction, "endpoint", x.endpoint.Addr, "err", err)
		x.p.opts.Metrics.Resent(x.req.Direction)
		x.failed[(x.attempts-1)%len(x.failed)] = x.endpoint.Addr
		x.judgeError(err)
		if err := x.rebalance(); err != nil {
			return err
		}
	}
}

// maxResends bounds the re-sends of one request by the retry rule.
const maxResends = 3

// rebalance chooses the endpoint of a re-send, one that has not failed
// this request when the balancer offers one in a few tries (during a
// rolling update several endpoints may be going away at once).
func (x *exchange) rebalance() error {
	if x.p.opts.Balance == nil {
		return nil
	}
	for try := 0; ; try++ {
		if err := x.balance(context.Background()); err != nil {
			return err
		}
		if !slices.Contains(x.failed[:], x.endpoint.Addr) || try == 3 {
			return nil
		}
	}
}

// attemptError says how far a failed attempt got, for the retry rule.
type attemptError struct {
	err      error
	reused   bool // the connection came from the pool
	sent     bool // some of the request was written
	answered bool // the upstream sent something back
}

func (e *attemptError) Error() string { return e.err.Error() }
func (e *attemptError) Unwrap() error { return e.err }

// retrySafe is the retry rule (not a route's retry policy: it never
// re-sends a request a server may have acted on), up to maxResends times,
// on a new connection and another endpoint when there is one:
//   - the connection could not be made (refused, reset, TLS failed):
//     nothing reached a server; sent again whatever the method, when the
//     body can be (held, or none);
//   - the connection broke before anything came back: sent again when the
//     body is held and none of it was written, or, on a pooled connection
//     (its server may have closed it while idle), when the method is
//     idempotent. A new connection that breaks after the request was
//     written is not re-sent: a server (or the proxy in front of it)
//     took the request.
//
// Never after a limit fired (a timeout would be waited out twice) or the
// client left.
func (x *exchange) retrySafe(err error) bool {
	var ae *attemptError
	var ce *clientError
	var le *limitError
	var de *dialError
	switch {
	case x.attempts > maxResends, errors.As(err, &ce), errors.As(err, &le), isTimeout(err):
		return false
	case errors.As(err, &de), errors.Is(err, errPeerNotReached):
		return x.req.Replayable || x.req.ContentLength == 0
	case errors.Is(err, errPeerAppFailed):
		return (x.req.Replayable || x.req.ContentLength == 0) && x.req.idempotent()
	}
	return errors.As(err, &ae) && !ae.answered && x.req.Replayable && (!ae.sent || ae.reused && x.req.idempotent())
}

// willResend is retrySafe as the attempt loop will ask it once the
// current attempt is counted: an engine turning a peer's answer into an
// error asks it first, so that an answer the loop would not re-send is
// relayed as it is.
func (x *exchange) willResend(err error) bool {
	x.attempts++
	defer func() { x.attempts-- }()
	return x.retrySafe(err)
}

// headers records that response headers are ready (and, for the
// balancer, the endpoint's response time).
func (x *exchange) headers(status int) {
	x.answered()
	x.rec.Headers(status)
	x.tap.Response(status)
}

// answered records that the endpoint answered (response headers came),
// whether or not the answer is relayed: the balancer's RTT sample, and
// its proof that the endpoint is alive (balance/silence.go). Calls after
// the first are ignored.
func (x *exchange) answered() {
	if x.endpoint.Load != nil {
		x.endpoint.Load.FirstByte()
	}
}

// finish records the end of the response.
func (x *exchange) finish(status int, grpcStatus, reason string) {
	if x.rule != nil && x.rule.Classifies() {
		// A ServiceProfile's responseClasses decide success.
		x.rec.DoneClassified(status, grpcStatus, reason, x.rule.IsFailure(status, grpcStatus))
	} else {
		x.rec.Done(status, grpcStatus, reason)
	}
	x.judgeResponse(status, grpcStatus, reason)
	x.routeDone(status, grpcStatus, reason)
	x.tap.End(status, grpcStatus, reason, x.bodyBytes)
}

// fail decides the answer to a request that could not be forwarded and
// records it; the engine writes it (nothing, for ReasonClientGone).
func (x *exchange) fail(err error) answer {
	a := failure(err, x.req.GRPC)
	x.p.opts.Log.Debug("request failed", "direction", x.req.Direction, "host", x.req.Authority, "reason", a.reason, "err", err)
	x.p.countLimit(err)
	x.judgeError(err)
	if a.reason != ReasonClientGone {
		x.rec.Headers(a.status)
		x.tap.Response(a.status)
	}
	x.rec.Done(a.status, a.grpcStatus, a.reason)
	x.routeDone(a.status, a.grpcStatus, a.reason)
	x.tap.End(a.status, a.grpcStatus, a.reason, int64(len(a.body)))
	return a
}

// end releases what balance took (the endpoint's in-flight count).
func (x *exchange) end() {
	if x.endpoint.Load != nil {
		x.endpoint.Load.Done(x.outcome)
		x.endpoint.Load = nil
	}
	x.outcome = balance.OutcomeNone
	x.routed = false
}
