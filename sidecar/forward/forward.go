// Package forward joins two TCP connections with a bidirectional byte copy:
// pooled buffers, half-close propagation and an idle timeout.
package forward

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// BufferSize is the size of each direction's pooled copy buffer. A joined
// pair holds two while it lives, so it bounds per-connection memory.
const BufferSize = 16 << 10

// ErrIdle is returned by Join when neither side moved a byte for the idle timeout.
var ErrIdle = errors.New("forward: idle timeout")

// Joiner joins connection pairs. It is safe for concurrent use.
type Joiner struct {
	idle time.Duration
	pool sync.Pool
}

// New returns a Joiner that closes a pair after idle without traffic.
func New(idle time.Duration) *Joiner {
	return &Joiner{idle: idle, pool: sync.Pool{New: func() any { return new([BufferSize]byte) }}}
}

// Counts are called with every chunk copied; either may be nil. They run
// on the copying goroutines and must not block.
type Counts struct {
	ClientToServer func(n int)
	ServerToClient func(n int)
}

// Result reports how many bytes moved each way.
type Result struct {
	ClientToServer, ServerToClient int64
}

// Join copies client→server and server→client until both directions have
// ended, then closes both connections. A direction ends on EOF, which is
// propagated as a half-close (CloseWrite, or Close for a stream that
// cannot half-close) to the other side, so a client
// that shuts down its write side still gets the whole response. Any other
// read or write error (which also marks both conns failed, if they have a
// Fail method), or the idle timeout, closes both connections at once and
// is returned (the first one). Join always closes both conns and
// leaves no goroutine behind.
func (j *Joiner) Join(client, server io.ReadWriteCloser, counts Counts) (Result, error) {
	p := pair{client: client, server: server}
	p.touch()
	// Arm only after p.watchdog is set, so the callback can always Reset it.
	watchdog := time.AfterFunc(time.Duration(math.MaxInt64), func() { p.checkIdle(j.idle) })
	p.watchdog = watchdog
	watchdog.Reset(j.idle)

	var wg sync.WaitGroup
	var res Result
	var upErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		res.ClientToServer, upErr = j.copy(&p, server, client, counts.ClientToServer)
	}()
	var downErr error
	res.ServerToClient, downErr = j.copy(&p, client, server, counts.ServerToClient)
	wg.Wait()
	watchdog.Stop()
	p.closeBoth(nil)
	if err := p.err(); err != nil {
		return res, err
	}
	if upErr != nil {
		return res, fmt.Errorf("client to server: %w", upErr)
	}
	if downErr != nil {
		return res, fmt.Errorf("server to client: %w", downErr)
	}
	return res, nil
}

// copy moves bytes from src to dst until EOF or error. On EOF it
// half-closes dst; on error it aborts the whole pair.
func (j *Joiner) copy(p *pair, dst, src io.ReadWriteCloser, count func(int)) (int64, error) {
	buf := j.pool.Get().(*[BufferSize]byte)
	defer j.pool.Put(buf)
	var total int64
	for {
		n, rerr := src.Read(buf[:])
		if n > 0 {
			p.touch()
			w, werr := dst.Write(buf[:n])
			total += int64(w)
			if count != nil && w > 0 {
				count(w)
			}
			if werr != nil {
				p.abort()
				return total, fmt.Errorf("write: %w", werr)
			}
		}
		if rerr == nil {
			continue
		}
		if errors.Is(rerr, io.EOF) {
			if err := closeWrite(dst); err != nil {
				p.abort()
				return total, fmt.Errorf("half-close: %w", err)
			}
			return total, nil
		}
		p.abort()
		return total, fmt.Errorf("read: %w", rerr)
	}
}

func closeWrite(c io.ReadWriteCloser) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// pair is the shared state of one Join.
type pair struct {
	client, server io.ReadWriteCloser
	last           atomic.Int64 // unix nanos of the last byte read either way
	watchdog       *time.Timer
	once           sync.Once
	cause          atomic.Pointer[error]
}

func (p *pair) touch() { p.last.Store(time.Now().UnixNano()) }

// checkIdle runs from the watchdog timer: it closes the pair when it has
// been idle for the whole timeout, or re-arms for the remaining time.
func (p *pair) checkIdle(idle time.Duration) {
	since := time.Since(time.Unix(0, p.last.Load()))
	if since >= idle {
		p.closeBoth(ErrIdle)
		return
	}
	p.watchdog.Reset(idle - since)
}

// abort marks both sides as failed (for conns with a Fail method, such
// as metrics.Conn) and closes them.
func (p *pair) abort() {
	for _, c := range []io.ReadWriteCloser{p.client, p.server} {
		if f, ok := c.(interface{ Fail() }); ok {
			f.Fail()
		}
	}
	p.closeBoth(nil)
}

// closeBoth closes both connections once, remembering cause (if any) as
// the reason Join reports.
func (p *pair) closeBoth(cause error) {
	p.once.Do(func() {
		if cause != nil {
			p.cause.Store(&cause)
		}
		p.client.Close()
		p.server.Close()
	})
}

func (p *pair) err() error {
	if e := p.cause.Load(); e != nil {
		return *e
	}
	return nil
}
