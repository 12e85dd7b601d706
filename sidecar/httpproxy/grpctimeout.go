package httpproxy

import (
	"context"
	"math"
	"net/http"
	"strconv"
	"time"
)

// gRPC carries a call's deadline in the grpc-timeout request header
// (PROTOCOL-HTTP2.md: at most 8 ASCII digits, then one of H M S m u n).
// The proxy holds the call to it, as the client and server do: when it
// passes, the proxy cancels the upstream stream (the server sees its
// context end) and answers DEADLINE_EXCEEDED. Each attempt forwards
// the time that remains, so time spent in the proxy is not given twice.

// errGRPCDeadline is the cause of a call's end at its grpc-timeout.
var errGRPCDeadline = &routeError{status: http.StatusGatewayTimeout, reason: ReasonGRPCDeadline, msg: "the call's grpc-timeout passed"}

// maxGRPCTimeout is the longest grpc-timeout the proxy enforces; a longer
// one (up to 99,999,999 hours) is forwarded untouched, like none.
const maxGRPCTimeout = 366 * 24 * time.Hour

// withGRPCDeadline returns r with a context that ends at its grpc-timeout
// (cause errGRPCDeadline), and the function that releases it. A missing,
// malformed or too long grpc-timeout leaves r as it is: the proxy
// forwards it, and the server judges it.
func withGRPCDeadline(r *http.Request) (*http.Request, context.CancelFunc) {
	d, ok := parseGRPCTimeout(r.Header.Get("Grpc-Timeout"))
	if !ok || d > maxGRPCTimeout {
		return r, func() {}
	}
	ctx, cancel := context.WithTimeoutCause(r.Context(), d, errGRPCDeadline)
	return r.WithContext(ctx), cancel
}

// setGRPCTimeout sets h's grpc-timeout to what remains of ctx's deadline,
// when it has one: the call's own, or a route timeout the proxy enforces.
func setGRPCTimeout(ctx context.Context, h http.Header) {
	if dl, ok := ctx.Deadline(); ok {
		h.Set("Grpc-Timeout", formatGRPCTimeout(time.Until(dl)))
	}
}

// grpcTimeoutUnits are the units of grpc-timeout, largest first.
var grpcTimeoutUnits = []struct {
	unit byte
	d    time.Duration
}{{'H', time.Hour}, {'M', time.Minute}, {'S', time.Second}, {'m', time.Millisecond}, {'u', time.Microsecond}, {'n', time.Nanosecond}}

// maxGRPCTimeoutValue is the largest value grpc-timeout can carry: 8 digits.
const maxGRPCTimeoutValue = 99_999_999

// parseGRPCTimeout reads a grpc-timeout value: 1 to 8 ASCII digits and a
// unit. A value past time.Duration's range is its maximum.
func parseGRPCTimeout(s string) (time.Duration, bool) {
	if len(s) < 2 || len(s) > 9 {
		return 0, false
	}
	var n int64
	for _, c := range []byte(s[:len(s)-1]) {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	for _, u := range grpcTimeoutUnits {
		if u.unit == s[len(s)-1] {
			if n > int64(maxDuration/u.d) {
				return maxDuration, true
			}
			return time.Duration(n) * u.d, true
		}
	}
	return 0, false
}

const maxDuration = time.Duration(math.MaxInt64)

// formatGRPCTimeout writes d as a grpc-timeout value in the finest unit
// that holds it in 8 digits, rounded up (a deadline is never brought
// forward); 0n when d has passed.
func formatGRPCTimeout(d time.Duration) string {
	if d <= 0 {
		return "0n"
	}
	for i := len(grpcTimeoutUnits) - 1; i >= 0; i-- {
		u := grpcTimeoutUnits[i]
		n := d / u.d
		if d%u.d != 0 {
			n++
		}
		if n <= maxGRPCTimeoutValue {
			return strconv.FormatInt(int64(n), 10) + string(u.unit)
		}
	}
	return strconv.Itoa(maxGRPCTimeoutValue) + "H"
}
