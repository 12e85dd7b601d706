package identity

import (
	"context"
	"errors"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Errors Certify wraps; grpcError maps them to gRPC codes and metric reasons.
var (
	ErrInvalidIdentity   = errors.New("invalid identity")
	ErrInvalidCSR        = errors.New("invalid certificate signing request")
	ErrCSRMismatch       = errors.New("CSR does not ask for exactly the identity")
	ErrUnauthenticated   = errors.New("token not authenticated")
	ErrWrongAudience     = errors.New("token not valid for the identity audience")
	ErrIdentityMismatch  = errors.New("token proves another identity")
	ErrTokenReviewFailed = errors.New("TokenReview failed")
	ErrIssuerNotLoaded   = errors.New("issuer not loaded")
	ErrIssue             = errors.New("signing failed")
	// ErrReservedNamespace: the identity's namespace is reserved for an
	// extension that is not installed (reserved.go).
	ErrReservedNamespace = errors.New("identity in a reserved namespace")
	// ErrReservedCheckFailed: whether the extension is installed could
	// not be read.
	ErrReservedCheckFailed = errors.New("reserved namespace check failed")
)

// classify is the one place that maps the service's errors to a gRPC code
// and to the reason label of plexus_identity_certify_rejected_total.
func classify(err error) (codes.Code, string) {
	switch {
	case errors.Is(err, ErrInvalidIdentity):
		return codes.InvalidArgument, "invalid_identity"
	case errors.Is(err, ErrInvalidCSR):
		return codes.InvalidArgument, "invalid_csr"
	case errors.Is(err, ErrCSRMismatch):
		return codes.InvalidArgument, "csr_mismatch"
	case errors.Is(err, ErrUnauthenticated):
		return codes.Unauthenticated, "unauthenticated"
	case errors.Is(err, ErrWrongAudience):
		return codes.Unauthenticated, "wrong_audience"
	case errors.Is(err, ErrIdentityMismatch):
		return codes.PermissionDenied, "identity_mismatch"
	case errors.Is(err, ErrReservedNamespace):
		return codes.PermissionDenied, "reserved_namespace"
	case errors.Is(err, ErrReservedCheckFailed):
		return codes.Unavailable, "reserved_check_failed"
	case errors.Is(err, ErrTokenReviewFailed):
		return codes.Unavailable, "token_review_failed"
	case errors.Is(err, ErrIssuerNotLoaded):
		return codes.Unavailable, "issuer_not_loaded"
	case errors.Is(err, context.Canceled):
		return codes.Canceled, "canceled"
	case errors.Is(err, context.DeadlineExceeded):
		return codes.DeadlineExceeded, "deadline_exceeded"
	default: // ErrIssue and anything unforeseen
		return codes.Internal, "internal"
	}
}

// rejectReasons are the reason labels classify can return, pre-created at zero.
var rejectReasons = []string{"invalid_identity", "invalid_csr", "csr_mismatch", "unauthenticated", "wrong_audience",
	"identity_mismatch", "reserved_namespace", "reserved_check_failed", "token_review_failed", "issuer_not_loaded", "canceled", "deadline_exceeded", "internal"}

// grpcError converts err to a gRPC status error and returns its reason label.
func grpcError(err error) (error, string) {
	code, reason := classify(err)
	return status.Error(code, err.Error()), reason
}
