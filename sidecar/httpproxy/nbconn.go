package httpproxy

import (
	"io"
	"net"
	"syscall"
)

// nbConn wraps an upstream TCP socket (under mesh TLS, if any) so that
// the pool can ask, without a deadline (moving one costs a runtime timer
// update each way), whether anything waits on an idle connection: with
// now set, a Read makes one non-blocking receive, a raw system call like
// sidecar/sockio's (through syscall.Recvfrom the runtime's bookkeeping
// cost about 12 µs a request), and returns errWouldBlock when the socket
// is empty, an error crypto/tls treats as temporary.
type nbConn struct {
	net.Conn
	raw syscall.RawConn
	now bool
	got int // bytes received while now was set
	// recv is the non-blocking receive, built once (a closure made per
	// call would be an allocation per request).
	recv  func(fd uintptr)
	buf   []byte
	n     int
	errno syscall.Errno
}

func newNBConn(c net.Conn, raw syscall.RawConn) *nbConn {
	nc := &nbConn{Conn: c, raw: raw}
	nc.recv = func(fd uintptr) { nc.n, nc.errno = recvNow(fd, nc.buf) }
	return nc
}

func (c *nbConn) Read(p []byte) (int, error) {
	if !c.now {
		return c.Conn.Read(p)
	}
	c.buf = p
	err := c.raw.Control(c.recv)
	c.buf = nil
	switch {
	case err != nil:
		return 0, err
	case c.errno == syscall.EAGAIN:
		return 0, errWouldBlock
	case c.errno != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Err: c.errno}
	case c.n == 0:
		return 0, io.EOF
	}
	c.got += c.n
	return c.n, nil
}

// quiet reports whether nothing waits on the connection tc over c: no
// byte, FIN or RST in the socket and, when tc is TLS, no decrypted byte
// and no record or part of one already read. Anything found was read: the
// connection is not to be used again.
func (c *nbConn) quiet(tc io.Reader) bool {
	c.now, c.got = true, 0
	var one [1]byte
	n, err := tc.Read(one[:])
	c.now = false
	return n == 0 && c.got == 0 && err == errWouldBlock
}

// errWouldBlock is what a non-blocking read of an empty socket returns.
var errWouldBlock error = wouldBlock{}

type wouldBlock struct{}

func (wouldBlock) Error() string   { return "nothing to read now" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }
