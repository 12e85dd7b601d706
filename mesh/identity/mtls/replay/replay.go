// Package replay provides a connection that returns bytes already read
// from it (by protocol detection or a parser) before reading on.
package replay

import (
	"fmt"
	"net"
)

// Conn returns Data before reading from the embedded connection.
type Conn struct {
	net.Conn
	Data []byte
}

// Read returns replayed bytes first.
func (c *Conn) Read(p []byte) (int, error) {
	if len(c.Data) > 0 {
		n := copy(p, c.Data)
		c.Data = c.Data[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// CloseWrite half-closes the underlying connection when it supports it.
func (c *Conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("replay: %T cannot half-close", c.Conn)
}
