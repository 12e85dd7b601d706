package httpproxy

import (
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/http2"

	"github.com/plexus-mesh/plexus/mesh/policy/routes"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// serveRule serves a request whose route rule needs more than a backend
// choice (net/http engine, HTTP/1 and HTTP/2 alike): a redirect, request
// and response filters, the request timeout over all attempts, the
// response timeout per attempt, and retries within the retry budget,
// with the body held (up to MaxReplayBody) for replay.
func (p *Proxy) serveRule(w http.ResponseWriter, r *http.Request, x *exchange) {
	rule := x.rule
	if status, loc, ok := rule.Redirect(r, x.match); ok {
		w.Header().Set("Location", loc)
		w.WriteHeader(status)
		x.headers(status)
		x.finish(status, "", "")
		return
	}
	ctx := r.Context()
	if t := rule.Timeouts.Request; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, t, errRouteTimeout)
		defer cancel()
	}
	x.reqCtx = ctx
	rp := rule.Retry
	var body *replayBody
	if rp != nil {
		rp.Budget.Deposit()
	}
	if holdsBody(r, rp != nil) {
		// Held for the route's retries, and on HTTP/2 for the
		// transport's own sending again after a GOAWAY (sendWith).
		body = newReplayBody(r.Body)
	}
	rs := routeSeries(rule)
	for n := 0; ; n++ {
		if n > 0 {
			err := x.pickBackend()
			if err == nil {
				err = x.balance(ctx)
			}
			if err != nil {
				p.answerHTTP(w, r, x.fail(err))
				return
			}
		}
		out := outgoing(r, x.endpoint.Addr, "")
		if body != nil {
			body.sendWith(out)
		}
		rule.RewriteRequest(x.backend, out, x.match)
		actx, acancel := ctx, context.CancelFunc(func() {})
		if t, cause := attemptTimeout(rule); t > 0 {
			actx, acancel = context.WithTimeoutCause(ctx, t, cause)
		}
		x.attemptCtx = actx
		res, done, err := p.send(actx, x, r, out)
		if body != nil && rp == nil {
			body.forget() // no route retry: nothing is sent again from here
		}
		err = timeoutCause(actx, err)
		status, grpc := 0, ""
		if err == nil {
			status, grpc = res.StatusCode, res.Header.Get("Grpc-Status")
			if grpc == "" && x.req.GRPC && rp.RetriesGRPC() {
				grpc = peekTrailers(res)
			}
		}
		if rp == nil || !retryableAttempt(rp, x.req, err, status, grpc) {
			if n > 0 && err == nil && !rule.IsFailure(status, grpc) {
				rs.RetrySucceeded()
			}
			p.relayRule(w, r, x, res, err, actx)
			done()
			acancel()
			return
		}
		switch {
		case n >= rp.Limit:
			rs.RetryLimitExceeded()
		case body != nil && !body.replayable():
			rs.RetryOverflow()
			p.opts.Metrics.LimitExceeded(p.opts.Direction, metrics.LimitRetryBody)
		case !rp.Budget.Withdraw():
			rs.RetryOverflow()
		default:
			// Let this attempt go, wait, and send the next.
			if res != nil {
				x.answered() // a retried answer is an answer still
				res.Body.Close()
			}
			x.attemptDone(status, grpc, err)
			x.end() // the endpoint hears its verdict now, not after the backoff
			done()
			acancel()
			if !sleep(ctx, routes.Backoff(n+1, rand.Uint64())) {
				p.answerHTTP(w, r, x.fail(timeoutCause(ctx, ctx.Err())))
				return
			}
			rs.Retry()
			continue
		}
		p.relayRule(w, r, x, res, err, actx)
		done()
		acancel()
		return
	}
}

// relayRule relays the last attempt's outcome: its response, with the
// rule's response filters, or the answer to its error.
func (p *Proxy) relayRule(w http.ResponseWriter, r *http.Request, x *exchange, res *http.Response, err error, actx context.Context) {
	if err != nil {
		p.answerHTTP(w, r, x.fail(err))
		return
	}
	x.rule.RewriteResponse(x.backend, res.Header)
	if t := x.rule.Timeouts.Idle; t > 0 {
		res.Body = newIdleBody(res.Body, t)
	}
	defer res.Body.Close() // the idle body's Close stops its timer
	x.headers(res.StatusCode)
	p.relayHTTP(w, r, res, x)
}

// retryableAttempt says whether the attempt's outcome is one rp retries:
// a status or gRPC code it names, a per-attempt timeout, or a failure to
// connect (nothing reached a server).
func retryableAttempt(rp *routes.RetryPolicy, req *Request, err error, status int, grpc string) bool {
	if err == nil {
		return rp.Retryable(status, grpc)
	}
	var de *dialError
	var ce *clientError
	switch {
	case errors.As(err, &de), errors.Is(err, ErrNoEndpoints):
		return true // nothing reached a server
	case errors.Is(err, errAttemptTimeout):
		// The server may be acting on it: only an idempotent request
		// is sent again.
		return req.idempotent()
	case errors.As(err, &ce), errors.Is(err, errRouteTimeout), errors.Is(err, errResponseTimeout):
		return false
	}
	// The upstream failed without a response (reset, closed): an
	// idempotent request is retried when the policy retries the status
	// the proxy answers for it (502 for a reset: 5xx, gateway-error).
	s, _ := classify(err)
	return req.idempotent() && rp.Retryable(s, "")
}

// holdsBody reports whether r's body is held for sending again: on HTTP/2
// always (a GOAWAY may refuse the stream unprocessed), and where the
// route retries. A request with no body holds nothing.
func holdsBody(r *http.Request, retries bool) bool {
	return (retries || r.ProtoMajor == 2) && r.ContentLength != 0 && r.Body != nil && r.Body != http.NoBody
}

// timeoutCause replaces a context error by the route timeout that caused
// it, so the answer and the metrics name it. An upstream that canceled
// the stream within upstreamCancelSlack of ctx's deadline did so for it (the
// deadline went upstream as grpc-timeout, which ends there a little
// before it ends here): that is waited out and named the same way.
func timeoutCause(ctx context.Context, err error) error {
	if err == nil {
		return err
	}
	if ctx.Err() == nil {
		dl, ok := ctx.Deadline()
		var se http2.StreamError
		if !ok || time.Until(dl) > upstreamCancelSlack || !errors.As(err, &se) || se.Code != http2.ErrCodeCancel {
			return err
		}
		<-ctx.Done()
	}
	var re *routeError
	if c := context.Cause(ctx); errors.As(c, &re) {
		return re
	}
	return err
}

// upstreamCancelSlack is how long before a deadline an upstream's cancel is
// taken for it: the one-way latency a forwarded grpc-timeout loses.
const upstreamCancelSlack = 10 * time.Millisecond

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// idleBody fails a response body that delivers no bytes for the idle
// timeout.
type idleBody struct {
	io.ReadCloser
	timeout time.Duration
	timer   *time.Timer
	fired   chan struct{}
	// once: a timer that fired just before a read renewed it fires again.
	once sync.Once
}

func newIdleBody(rc io.ReadCloser, d time.Duration) *idleBody {
	b := &idleBody{ReadCloser: rc, timeout: d, fired: make(chan struct{})}
	b.timer = time.AfterFunc(d, func() {
		b.once.Do(func() {
			close(b.fired)
			rc.Close()
		})
	})
	return b
}

func (b *idleBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	select {
	case <-b.fired:
		return n, errIdleTimeout
	default:
	}
	if n > 0 {
		b.timer.Reset(b.timeout)
	}
	return n, err
}

func (b *idleBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}

// peekTrailers reads a gRPC response's body up to its first bytes: a
// response that ends without any (a status sent as headers and trailers,
// as a proxy in between may turn a trailers-only response into) has its
// grpc-status in the trailers, which it returns so the retry policy can
// see it; otherwise the bytes read are put back and it returns "" (a
// stream that started is never retried).
//
// The wait is bounded by peekWait: a stream whose server sends headers and
// then waits for the client (which may wait for those headers) is relayed
// after it, and not retried.
func peekTrailers(res *http.Response) string {
	pb := &peekBody{ReadCloser: res.Body, done: make(chan struct{})}
	go func() {
		pb.n, pb.err = pb.ReadCloser.Read(pb.b[:])
		close(pb.done)
	}()
	t := time.NewTimer(peekWait)
	defer t.Stop()
	select {
	case <-pb.done:
		if pb.n == 0 && pb.err == io.EOF {
			return res.Trailer.Get("Grpc-Status")
		}
	case <-t.C:
	}
	res.Body = pb
	return ""
}

// peekWait bounds how long peekTrailers waits for a gRPC response body's
// first byte.
const peekWait = 50 * time.Millisecond

// peekBody returns the byte (or error) its first read got, then the rest
// of the body.
type peekBody struct {
	io.ReadCloser
	done   chan struct{}
	b      [1]byte
	n      int
	err    error
	served bool
}

func (b *peekBody) Read(p []byte) (int, error) {
	if !b.served {
		<-b.done
		b.served = true
		if b.n > 0 {
			p[0] = b.b[0]
			if b.err == io.EOF {
				b.err = nil // reported by the next read
			}
			return 1, b.err
		}
		if b.err != nil {
			return 0, b.err
		}
	}
	return b.ReadCloser.Read(p)
}
