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

// rejections is the one place that maps the service's errors to a gRPC
// code and to the reason label of plexus_identity_certify_rejected_total;
// the first entry err matches (errors.Is) wins.
var rejections = []struct {
	err    error
	code   codes.Code
	reason string
}{
	{ErrInvalidIdentity, codes.InvalidArgument, "invalid_identity"},
	{ErrInvalidCSR, codes.InvalidArgument, "invalid_csr"},
	{ErrCSRMismatch, codes.InvalidArgument, "csr_mismatch"},
	{ErrUnauthenticated, codes.Unauthenticated, "unauthenticated"},
	{ErrWrongAudience, codes.Unauthenticated, "wrong_audience"},
	{ErrIdentityMismatch, codes.PermissionDenied, "identity_mismatch"},
	{ErrReservedNamespace, codes.PermissionDenied, "reserved_namespace"},
	{ErrReservedCheckFailed, codes.Unavailable, "reserved_check_failed"},
	{ErrTokenReviewFailed, codes.Unavailable, "token_review_failed"},
	{ErrIssuerNotLoaded, codes.Unavailable, "issuer_not_loaded"},
	{context.Canceled, codes.Canceled, "canceled"},
	{context.DeadlineExceeded, codes.DeadlineExceeded, "deadline_exceeded"},
}

// internalReason labels ErrIssue and anything unforeseen (codes.Internal).
const internalReason = "internal"

// classify returns err's gRPC code and reason label.
func classify(err error) (codes.Code, string) {
	for _, r := range rejections {
		if errors.Is(err, r.err) {
			return r.code, r.reason
		}
	}
	return codes.Internal, internalReason
}

// rejectReasons are the reason labels classify can return, pre-created at zero.
func rejectReasons() []string {
	reasons := make([]string, 0, len(rejections)+1)
	for _, r := range rejections {
		reasons = append(reasons, r.reason)
	}
	return append(reasons, internalReason)
}

// grpcError converts err to a gRPC status error and returns its reason label.
func grpcError(err error) (error, string) {
	code, reason := classify(err)
	return status.Error(code, err.Error()), reason
}
