package tcptest

import (
	"net"
	"net/netip"
)

// Listener is a net.Listener whose connections a test hands in with
// Dial, each seen as coming from a given address: a port's bounds per
// source can be tested without leaving loopback.
type Listener struct {
	conns chan net.Conn
	done  chan struct{}
}

// NewListener returns an open Listener.
func NewListener() *Listener {
	return &Listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Dial hands the listener a connection from src and returns the client's
// end (an in-memory pipe).
func (l *Listener) Dial(src netip.AddrPort) net.Conn {
	client, server := net.Pipe()
	l.conns <- &fromConn{Conn: server, src: net.TCPAddrFromAddrPort(src)}
	return client
}

// Accept returns the next connection handed in.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close ends Accept.
func (l *Listener) Close() error {
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return nil
}

// Addr is a placeholder address.
func (l *Listener) Addr() net.Addr { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)} }

type fromConn struct {
	net.Conn
	src net.Addr
}

func (c *fromConn) RemoteAddr() net.Addr { return c.src }
