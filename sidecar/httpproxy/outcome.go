package httpproxy

import "github.com/plexus-mesh/plexus/sidecar/balance"

// The balancer's verdict on each attempt, for failure accrual: the
// endpoint failed it (a failure status, or the connection to it failed),
// answered it, or neither can be said (the client went away, a limit of
// the proxy's fired). Endpoint.Load's Done is told.

// judgeResponse gives the verdict on an attempt that got a response with
// status (and gRPC status, "" for none) and ended with reason ("" when it
// ended well).
func (x *exchange) judgeResponse(status int, grpcStatus, reason string) {
	switch {
	case endpointFault(reason), balance.IsFailureStatus(status, grpcStatus):
		x.outcome = balance.OutcomeFailure
	case reason != "":
		x.outcome = balance.OutcomeNone
	default:
		x.outcome = balance.OutcomeSuccess
	}
}

// judgeError gives the verdict on an attempt that failed with err before
// a response.
func (x *exchange) judgeError(err error) {
	x.outcome = balance.OutcomeNone
	if _, reason := classify(err); endpointFault(reason) {
		x.outcome = balance.OutcomeFailure
	}
}

// endpointFault reports whether a reason the proxy answers with is the
// endpoint's doing: it could not be reached, broke the connection, or did
// not answer in time.
func endpointFault(reason string) bool {
	switch reason {
	case ReasonConnectRefused, ReasonConnectTimeout, ReasonUnreachable, ReasonConnectError,
		ReasonUpstreamReset, ReasonTLS, ReasonTimeout, ReasonAttemptTimeout, ReasonResponseTimeout, ReasonIdleTimeout:
		return true
	}
	return false
}
