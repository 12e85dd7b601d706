package destination

import (
	"context"
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// PathError is a GetDestination.path that cannot be resolved as asked.
type PathError struct {
	Path   string
	Reason string
}

func (e *PathError) Error() string { return fmt.Sprintf("path %q: %s", e.Path, e.Reason) }

// RequestError is a request that cannot be answered as asked.
type RequestError struct{ Reason string }

func (e *RequestError) Error() string { return e.Reason }

// NotFoundError is a request for an object that does not exist.
type NotFoundError struct{ What string }

func (e *NotFoundError) Error() string { return e.What + " not found" }

// PermissionError is a request the caller may not make.
type PermissionError struct{ Reason string }

func (e *PermissionError) Error() string { return "permission denied: " + e.Reason }

// UnauthenticatedError is a caller that proved no identity destination
// accepts.
type UnauthenticatedError struct{ Reason string }

func (e *UnauthenticatedError) Error() string { return "unauthenticated: " + e.Reason }

// LimitError is a stream refused because its caller has as many open as
// it may.
type LimitError struct{ Reason string }

func (e *LimitError) Error() string { return e.Reason }

// ErrNoInbound is returned by GetInboundPolicy on a server that does not
// watch inbound policies (WatchInbound).
var ErrNoInbound = errors.New("this destination server does not serve inbound policies")

// ErrNotReady is returned while the informer caches have not synced.
var ErrNotReady = errors.New("destination service is not ready: informer caches have not synced")

// ErrOverflow ends a stream whose reader fell more than the queue size
// behind; the client should reconnect and will get a fresh snapshot.
var ErrOverflow = errors.New("stream fell behind: update queue overflowed")

// grpcError maps the package's errors to gRPC status errors. It is the one
// place where that mapping happens.
func grpcError(err error) error {
	if err == nil {
		return nil
	}
	var (
		pathErr       *PathError
		requestErr    *RequestError
		notFoundErr   *NotFoundError
		permissionErr *PermissionError
		unauthErr     *UnauthenticatedError
		limitErr      *LimitError
	)
	switch {
	case errors.As(err, &pathErr), errors.As(err, &requestErr):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.As(err, &notFoundErr):
		return status.Error(codes.NotFound, err.Error())
	case errors.As(err, &permissionErr):
		return status.Error(codes.PermissionDenied, err.Error())
	case errors.As(err, &unauthErr):
		return status.Error(codes.Unauthenticated, err.Error())
	case errors.As(err, &limitErr):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, ErrNoInbound):
		return status.Error(codes.Unimplemented, err.Error())
	case errors.Is(err, ErrNotReady):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, ErrOverflow):
		return status.Error(codes.ResourceExhausted, err.Error())
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, err.Error())
	}
	if _, ok := status.FromError(err); ok {
		return err // already a status (from stream.Send)
	}
	return status.Error(codes.Internal, err.Error())
}
