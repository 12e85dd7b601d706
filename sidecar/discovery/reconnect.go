package discovery

import (
	"context"
	"math/rand/v2"
	"time"
)

// keepStream runs stream until ctx ends, again after each end with
// jittered exponential backoff (MinBackoff doubling to MaxBackoff, back
// to MinBackoff after a stream that delivered a message). ended is told
// of each end and the wait before the next try.
func (r *Resolver) keepStream(ctx context.Context, stream func(context.Context) (got bool, err error), ended func(err error, retryIn time.Duration)) {
	backoff := r.opts.MinBackoff
	for {
		got, err := stream(ctx)
		if ctx.Err() != nil {
			return
		}
		if got {
			backoff = r.opts.MinBackoff
		}
		ended(err, backoff)
		t := time.NewTimer(backoff/2 + rand.N(backoff/2+1))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, r.opts.MaxBackoff)
	}
}

// waitFirst waits until first is closed (a stream's first answer), d
// passed, or ctx ended.
func waitFirst(ctx context.Context, first <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-first:
	case <-t.C:
	case <-ctx.Done():
	}
}
