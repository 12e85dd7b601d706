// Package sockio gives the proxy TCP connections whose reads and writes
// are plain system calls on the non-blocking socket, issued through the
// connection's RawConn (deadlines, closing and the poller work as usual)
// but without the Go runtime's system-call bookkeeping.
//
// Why: the proxy runs one worker thread. With the bookkeeping, the
// runtime's monitor takes the processor away from any goroutine whose
// socket call lasts over 20 µs (a send on a local socket runs the
// receiver's network stack, which often takes that long) and wakes
// another thread to look for work, about once per request. Without it,
// the proxy's CPU halved in meshbench and its added latency dropped to
// nginx's (integration/BENCHMARKS.md). A call on a non-blocking socket
// never waits, so holding the thread through it costs nothing.
package sockio

import (
	"fmt"
	"io"
	"net"
)

// Conn is a TCP connection whose Read and Write bypass the runtime's
// system-call bookkeeping; everything else is the *net.TCPConn's.
type Conn struct {
	*net.TCPConn
	raw rawConn
}

// Wrap returns c with raw reads and writes, or c itself where that is
// not available (not Linux, or no RawConn).
func Wrap(c *net.TCPConn) net.Conn {
	rc, err := c.SyscallConn()
	if err != nil || !supported {
		return c
	}
	return &Conn{TCPConn: c, raw: rawConn{rc}}
}

// Read reads like net.TCPConn.Read.
func (c *Conn) Read(p []byte) (int, error) {
	n, err := c.raw.read(p)
	if err != nil {
		err = c.opError("read", err)
	}
	return n, err
}

// Write writes all of p like net.TCPConn.Write.
func (c *Conn) Write(p []byte) (int, error) {
	n, err := c.raw.write(p)
	if err != nil {
		err = c.opError("write", err)
	}
	return n, err
}

// opError wraps err as net.TCPConn would, so callers see the same error
// types (net.Error timeouts, errors.Is with syscall errnos, io.EOF).
func (c *Conn) opError(op string, err error) error {
	if err == io.EOF {
		return err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: err}
}

// CloseWrite half-closes c when it can (a TCP connection, or a wrapper
// that passes CloseWrite on, as each of the proxy's does), and says it
// cannot otherwise.
func CloseWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("%T cannot half-close", c)
}
