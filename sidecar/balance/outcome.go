package balance

import "strings"

// Outcome is how a request placed on an endpoint ended, as failure
// accrual counts it.
type Outcome uint8

const (
	// OutcomeNone: no verdict on the endpoint (its client went away, a
	// limit of the proxy's fired, or the request was never sent).
	OutcomeNone Outcome = iota
	// OutcomeSuccess: the endpoint answered with a status that is not a
	// failure (IsFailureStatus).
	OutcomeSuccess
	// OutcomeFailure: a failure status, or the connection to the endpoint
	// failed (refused, reset, broken before or during the response).
	OutcomeFailure
)

// Report reports a request on b that ended with o at now; rnd, a
// uniformly random word, draws the jitter of a penalty it starts. Only a
// failure reads now (a caller may skip reading the clock otherwise).
// restored says that the request was b's probe and b is in again.
func (b *Breaker) Report(o Outcome, now int64, rnd uint64) (restored bool) {
	switch o {
	case OutcomeSuccess:
		return b.Success(now)
	case OutcomeFailure:
		b.Failure(now, rnd)
	default:
		b.Cancel()
	}
	return false
}

// IsFailureStatus reports whether a response counts as a failure for
// accrual: an HTTP status 500–599, or a gRPC status UNAVAILABLE (14),
// INTERNAL (13), DATA_LOSS (15) or DEADLINE_EXCEEDED (4). httpStatus 0 is
// no HTTP status; grpcStatus is the grpc-status value (the number) or the
// code's name (UNAVAILABLE or unavailable, DATA_LOSS or data-loss), ""
// for none. A connection error, or any failure with no response, is a
// failure the caller reports without asking. It allocates nothing.
func IsFailureStatus(httpStatus int, grpcStatus string) bool {
	if httpStatus >= 500 && httpStatus <= 599 {
		return true
	}
	switch grpcStatus {
	case "":
		return false
	case "4", "13", "14", "15":
		return true
	}
	for _, name := range [...]string{"UNAVAILABLE", "INTERNAL", "DATA_LOSS", "DEADLINE_EXCEEDED", "data-loss", "deadline-exceeded"} {
		if strings.EqualFold(grpcStatus, name) {
			return true
		}
	}
	return false
}
