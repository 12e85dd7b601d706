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
	var pathErr *PathError
	switch {
	case errors.As(err, &pathErr):
		return status.Error(codes.InvalidArgument, err.Error())
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
