package balance

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
func (b *Breaker) Report(o Outcome, now int64, rnd uint64) {
	switch o {
	case OutcomeSuccess:
		b.Success(now)
	case OutcomeFailure:
		b.Failure(now, rnd)
	default:
		b.Cancel()
	}
}
