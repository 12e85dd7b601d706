package portforward

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// DialConn is Dial as a net.Conn, for clients that need one: TLS, or
// gRPC through grpc.WithContextDialer.
func (d PodDialer) DialConn(ctx context.Context, ns, pod string, port uint16) (net.Conn, error) {
	s, err := d.Dial(ctx, ns, pod, port)
	if err != nil {
		return nil, err
	}
	return Conn(s, fmt.Sprintf("%s/%s:%d", ns, pod, port)), nil
}

// Conn makes a net.Conn of a port-forward stream (Dial's) to the pod port
// named name ("ns/pod:port", its remote address). A stream cannot time
// out one read or write, so a deadline that passes closes the connection
// (what a caller that sets one does next anyway) and the read or write it
// ends fails with os.ErrDeadlineExceeded; a deadline changed or cleared
// before it passes does nothing.
func Conn(s io.ReadWriteCloser, name string) net.Conn {
	return &streamConn{s: s, remote: addr(name)}
}

type streamConn struct {
	s       io.ReadWriteCloser
	remote  addr
	once    sync.Once
	err     error
	expired atomic.Bool
	mu      sync.Mutex
	timers  [2]*time.Timer // read, write deadline
}

func (c *streamConn) Read(p []byte) (int, error) {
	n, err := c.s.Read(p)
	return n, c.deadlineErr(err)
}

func (c *streamConn) Write(p []byte) (int, error) {
	n, err := c.s.Write(p)
	return n, c.deadlineErr(err)
}

func (c *streamConn) deadlineErr(err error) error {
	if err != nil && c.expired.Load() {
		return os.ErrDeadlineExceeded
	}
	return err
}

func (c *streamConn) Close() error {
	c.once.Do(func() {
		c.mu.Lock()
		for i, t := range c.timers {
			if t != nil {
				t.Stop()
				c.timers[i] = nil
			}
		}
		c.mu.Unlock()
		c.err = c.s.Close()
	})
	return c.err
}

func (c *streamConn) LocalAddr() net.Addr  { return addr("plexusctl") }
func (c *streamConn) RemoteAddr() net.Addr { return c.remote }

func (c *streamConn) SetDeadline(t time.Time) error {
	c.setDeadline(0, t)
	c.setDeadline(1, t)
	return nil
}

func (c *streamConn) SetReadDeadline(t time.Time) error  { c.setDeadline(0, t); return nil }
func (c *streamConn) SetWriteDeadline(t time.Time) error { c.setDeadline(1, t); return nil }

func (c *streamConn) setDeadline(i int, t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.timers[i] != nil {
		c.timers[i].Stop()
		c.timers[i] = nil
	}
	if t.IsZero() {
		return
	}
	c.timers[i] = time.AfterFunc(time.Until(t), func() {
		c.expired.Store(true)
		_ = c.Close()
	})
}

// addr is the address of one end of a port-forward.
type addr string

func (a addr) Network() string { return "portforward" }
func (a addr) String() string  { return string(a) }
