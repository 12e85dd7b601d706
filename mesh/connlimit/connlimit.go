// Package connlimit bounds the connections a port holds: at most a number
// in all and a number from one address, loopback clients not counted
// (the pod itself, an operator's port-forward). The proxy's admin and
// probe ports and the control plane's admin ports use it: any pod can
// reach them, and an idle connection costs memory.
package connlimit

import (
	"net"
	"net/netip"
	"sync"
)

// Limiter counts the connections it admitted and has not had back.
type Limiter struct {
	max, perSource int
	mu             sync.Mutex
	n              int
	bySource       map[netip.Addr]int
}

// New admits max connections in all, perSource from one address.
func New(max, perSource int) *Limiter {
	return &Limiter{max: max, perSource: perSource, bySource: map[netip.Addr]int{}}
}

// Take admits a connection from src, returning the function that gives
// its place back (call it once), or ok=false.
func (l *Limiter) Take(src netip.Addr) (release func(), ok bool) {
	src = src.Unmap()
	if src.IsLoopback() {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.n >= l.max || l.bySource[src] >= l.perSource {
		return nil, false
	}
	l.n++
	l.bySource[src]++
	return sync.OnceFunc(func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.n--
		if l.bySource[src]--; l.bySource[src] <= 0 {
			delete(l.bySource, src)
		}
	}), true
}

// Listener accepts the connections l admits; one more is reset at once
// (its client does not wait) and refused is called.
func Listener(ln net.Listener, l *Limiter, refused func()) net.Listener {
	return &capped{Listener: ln, limit: l, refused: refused}
}

type capped struct {
	net.Listener
	limit   *Limiter
	refused func()
}

func (l *capped) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		release, ok := l.limit.Take(RemoteAddr(c))
		if !ok {
			l.refused()
			ResetClose(c)
			continue
		}
		return &slotConn{Conn: c, release: release}, nil
	}
}

// slotConn gives its slot back when closed.
type slotConn struct {
	net.Conn
	release func()
}

func (c *slotConn) Close() error {
	c.release()
	return c.Conn.Close()
}

// NetConn is the connection itself (closing it does not give the slot
// back: Close c).
func (c *slotConn) NetConn() net.Conn { return c.Conn }

// CloseWrite half-closes the connection when it is TCP (else closes it).
func (c *slotConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// SetLinger sets SO_LINGER when the connection is TCP (ResetClose).
func (c *slotConn) SetLinger(sec int) error {
	if l, ok := c.Conn.(interface{ SetLinger(int) error }); ok {
		return l.SetLinger(sec)
	}
	return nil
}

// RemoteAddr is c's peer address (the zero Addr when it has none).
func RemoteAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr()
	}
	return netip.Addr{}
}

// ResetClose closes c with a reset, so its client does not wait.
func ResetClose(c net.Conn) {
	if l, ok := c.(interface{ SetLinger(int) error }); ok {
		_ = l.SetLinger(0)
	}
	c.Close()
}
