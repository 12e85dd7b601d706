package httpproxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
	"syscall"
)

// Reasons the proxy puts in the plexus-proxy-error header and the error
// label of response_total. The set is closed (bounded cardinality).
const (
	ReasonConnectRefused  = "connect-refused"         // 502: nothing listens at the destination
	ReasonConnectTimeout  = "connect-timeout"         // 504: the dial did not finish in time
	ReasonUnreachable     = "destination-unreachable" // 503: no route to the destination
	ReasonConnectError    = "connect-error"           // 502: any other dial failure
	ReasonUpstreamReset   = "upstream-reset"          // 502: the connection broke before response headers
	ReasonTimeout         = "response-timeout"        // 504: a deadline passed before response headers
	ReasonClientGone      = "client-canceled"         // no response: the client went away first
	ReasonClientReset     = "client-reset"            // the client stopped reading the response body
	ReasonNoEndpoints     = "no-endpoints"            // 503: destination knows the service but nothing was available for 3 s
	ReasonQueueFull       = "queue-full"              // 503: 100 requests already wait for an endpoint of the service
	ReasonDraining        = "draining"                // 503: the endpoint's proxy is shutting down and forwarded nothing
	ReasonUnauthorized    = "unauthorized"            // 403: the inbound policy does not authorize the client
	ReasonRateLimited     = "rate-limited"            // 429: over the Server's HTTPLocalRateLimitPolicy
	ReasonTLS             = "tls-handshake"           // 502: the upstream proxy failed mesh mTLS (e.g. wrong identity)
	ReasonBadRequest      = "bad-request"             // 400: the request's chunked body is malformed
	ReasonRequestTimeout  = "request-timeout"         // 408: the request body stalled
	ReasonNoRoute         = "route-not-found"         // 404: the Service has routes and none matches
	ReasonNoBackend       = "backend-invalid"         // 500: the route's backend is missing or unusable
	ReasonRouteTimeout    = "route-timeout"           // 504: the route's request timeout passed (all attempts)
	ReasonAttemptTimeout  = "attempt-timeout"         // 504: the route's per-attempt (retry) timeout passed
	ReasonResponseTimeout = "route-response-timeout"  // 504: the route's response timeout passed
	ReasonIdleTimeout     = "idle-timeout"            // 504: the route's idle timeout passed
	ReasonInvalidPath     = "invalid-path"            // 400: the path is badly encoded, or ambiguous where routes tell paths apart (pathnorm)
	ReasonGRPCDeadline    = "grpc-deadline"           // 504 (DEADLINE_EXCEEDED): the call's grpc-timeout passed
)

// errPeerNotReached: the endpoint's own proxy (a meshed peer) answered
// that it could not connect to its application, so the request reached
// no server and may be sent again, whatever its method. Only a peer that
// proved the endpoint's mesh identity is believed.
var errPeerNotReached = errors.New("the endpoint's proxy could not reach its application")

// errPeerAppFailed: the endpoint's own proxy answered that its
// application broke the connection before any response (it exited, as in
// a rolling update). The application may have acted on the request, so
// only an idempotent request is sent again.
var errPeerAppFailed = errors.New("the endpoint's application broke the connection before answering")

// peerNotReached reports whether a meshed endpoint's answer (status and
// plexus-proxy-error) says the request never reached the application: its
// proxy failed to connect to it (the application is gone or not yet
// listening, as in a rolling update), or is shutting down and forwarded
// nothing.
func peerNotReached(meshed bool, status int, reason string) bool {
	return meshed && (status == http.StatusBadGateway && reason == ReasonConnectRefused ||
		status == http.StatusServiceUnavailable && reason == ReasonDraining)
}

// peerError is the error a meshed endpoint's own answer stands for, for
// the retry rule: errPeerNotReached, errPeerAppFailed, or nil (relay it).
func peerError(meshed bool, status int, reason string) error {
	switch {
	case peerNotReached(meshed, status, reason):
		return errPeerNotReached
	case meshed && status == http.StatusBadGateway && reason == ReasonUpstreamReset:
		return errPeerAppFailed
	}
	return nil
}

// routeError is an answer the route stage decided.
type routeError struct {
	status int
	reason string
	msg    string
}

func (e *routeError) Error() string { return e.reason + ": " + e.msg }

// errUnauthorized: the port's inbound policy does not let the client
// send the request.
var errUnauthorized = &routeError{status: http.StatusForbidden, reason: ReasonUnauthorized, msg: "the inbound policy does not authorize this client"}

// errRateLimited: over the port's rate limit.
var errRateLimited = &routeError{status: http.StatusTooManyRequests, reason: ReasonRateLimited, msg: "over the server's rate limit"}

// errDraining: the proxy is shutting down and forwards nothing new.
var errDraining = &routeError{status: http.StatusServiceUnavailable, reason: ReasonDraining, msg: "the proxy is shutting down; the request was not forwarded"}

// invalidPath: the request's path is badly encoded, or ambiguous
// (pathnorm.Ambiguous names why) where routes or policy tell paths apart.
func invalidPath(why string) error {
	return &routeError{status: http.StatusBadRequest, reason: ReasonInvalidPath,
		msg: "the request's path is " + why + ": an application may read it as another path than the one routes and policy would decide on; send it in normal form (no ;-parameters, dot or empty segments, encoded / or \\, or double encoding)"}
}

// errNoRoute: the destination has routes and none matches the request.
var errNoRoute = &routeError{status: http.StatusNotFound, reason: ReasonNoRoute, msg: "no route matches the request"}

// The causes of a route's timeouts, set on the contexts they cancel.
var (
	errRouteTimeout    = &routeError{status: http.StatusGatewayTimeout, reason: ReasonRouteTimeout, msg: "the route's request timeout passed"}
	errAttemptTimeout  = &routeError{status: http.StatusGatewayTimeout, reason: ReasonAttemptTimeout, msg: "the route's per-attempt timeout passed"}
	errResponseTimeout = &routeError{status: http.StatusGatewayTimeout, reason: ReasonResponseTimeout, msg: "the route's response timeout passed"}
	errIdleTimeout     = &routeError{status: http.StatusGatewayTimeout, reason: ReasonIdleTimeout, msg: "no bytes within the route's idle timeout"}
)

// clientError marks a failure of the client's own request: it went away,
// sent a malformed body, or let its body stall.
type clientError struct{ err error }

func (e *clientError) Error() string { return "client: " + e.err.Error() }
func (e *clientError) Unwrap() error { return e.err }

// limitError marks a failure caused by one of the proxy's limits, named
// by a metrics.Limit* value; it is counted when the request is answered.
type limitError struct {
	limit string
	err   error
}

func (e *limitError) Error() string { return e.limit + " limit: " + e.err.Error() }
func (e *limitError) Unwrap() error { return e.err }

// countLimit counts the limit behind err, if one is.
func (p *Proxy) countLimit(err error) {
	var le *limitError
	if errors.As(err, &le) {
		p.opts.Metrics.LimitExceeded(p.opts.Direction, le.limit)
	}
}

// classify maps a RoundTrip error to HTTP status and reason.
func classify(err error) (int, string) {
	var de *dialError
	isDial := errors.As(err, &de)
	var ne net.Error
	timeout := errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
	var te *tlsError
	var ce *clientError
	var we *writeError
	client := errors.As(err, &ce)
	var re *routeError
	switch {
	case errors.As(err, &re):
		return re.status, re.reason
	case errors.Is(err, errPeerNotReached):
		return http.StatusBadGateway, ReasonConnectRefused
	case errors.Is(err, errPeerAppFailed):
		return http.StatusBadGateway, ReasonUpstreamReset
	case client && errors.As(err, &we):
		return 499, ReasonClientGone // it stopped reading: nothing more can reach it
	case client && errors.Is(err, errBadChunk):
		return http.StatusBadRequest, ReasonBadRequest
	case client && timeout:
		return http.StatusRequestTimeout, ReasonRequestTimeout
	case client:
		return 499, ReasonClientGone
	case errors.Is(err, ErrNoEndpoints):
		return http.StatusServiceUnavailable, ReasonNoEndpoints
	case errors.Is(err, ErrQueueFull):
		return http.StatusServiceUnavailable, ReasonQueueFull
	case errors.As(err, &te):
		return http.StatusBadGateway, ReasonTLS
	case errors.Is(err, context.Canceled):
		return 499, ReasonClientGone
	case isDial:
		reason := connectReason(de.err)
		return connectStatus[reason], reason
	case timeout:
		return http.StatusGatewayTimeout, ReasonTimeout
	default:
		return http.StatusBadGateway, ReasonUpstreamReset
	}
}

// connectReason names why a dial failed with err: it timed out, was
// refused, found no route, or failed otherwise (the proxy's own trouble,
// such as running out of file descriptors, or a bad address).
func connectReason(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout():
		return ReasonConnectTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return ReasonConnectRefused
	case errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH):
		return ReasonUnreachable
	default:
		return ReasonConnectError
	}
}

// connectStatus is the status the proxy answers a failed dial with, by
// connectReason.
var connectStatus = map[string]int{
	ReasonConnectTimeout: http.StatusGatewayTimeout,
	ReasonConnectRefused: http.StatusBadGateway,
	ReasonUnreachable:    http.StatusServiceUnavailable,
	ReasonConnectError:   http.StatusBadGateway,
}

// grpcCode maps the HTTP status of a proxy error to a gRPC status code.
func grpcCode(status int) int {
	switch status {
	case http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return 4 // DEADLINE_EXCEEDED
	case http.StatusBadRequest, http.StatusInternalServerError:
		return 13 // INTERNAL
	case http.StatusNotFound:
		return 12 // UNIMPLEMENTED
	case http.StatusForbidden:
		return 7 // PERMISSION_DENIED
	case http.StatusTooManyRequests:
		return 8 // RESOURCE_EXHAUSTED
	}
	return 14 // UNAVAILABLE
}

// answer is the response the proxy sends itself for a request it could
// not forward: the same on the net/http path and the HTTP/1.1 fast path.
type answer struct {
	status     int    // on the wire (200 for gRPC)
	reason     string // plexus-proxy-error and the metrics' error label
	grpcStatus string // "" unless gRPC
	header     http.Header
	body       string
}

// failure decides the answer to err. gRPC requests get a trailers-only
// HTTP 200 response with grpc-status, as gRPC clients expect. For
// ReasonClientGone there is nobody to answer; status is for the metrics.
func failure(err error, grpc bool) answer {
	status, reason := classify(err)
	a := answer{status: status, reason: reason, header: http.Header{}}
	if reason == ReasonClientGone {
		return a
	}
	a.header.Set(ErrorHeader, reason)
	msg := "plexus-proxy: " + reason
	var re *routeError
	if errors.As(err, &re) && re.msg != "" {
		msg += ": " + re.msg // what happened, in words
	}
	if grpc {
		a.status, a.grpcStatus = http.StatusOK, strconv.Itoa(grpcCode(status))
		a.header.Set("Content-Type", "application/grpc")
		a.header.Set("Grpc-Status", a.grpcStatus)
		a.header.Set("Grpc-Message", msg)
		return a
	}
	a.header.Set("Content-Type", "text/plain; charset=utf-8")
	a.body = msg + "\n"
	return a
}
