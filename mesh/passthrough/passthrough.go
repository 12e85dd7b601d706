// Package passthrough is the preface of a connection through a multicluster
// gateway (gateway mode, multicluster/README.md): a client proxy connects to
// the linked cluster's gateway, sends a PROXY protocol v2 header whose
// destination is the pod it wants, then runs its mesh mTLS handshake with
// that pod's proxy through the gateway. The gateway reads the header only,
// then joins the bytes both ways: it cannot read the session, and the pod's
// proxy sees the client's own certificate.
//
// The header is written and parsed by github.com/pires/go-proxyproto; this
// package holds what Plexus asks of it: version 2, TCP over IPv4 or IPv6,
// the PROXY command, a bounded size and a deadline.
package passthrough

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	proxyproto "github.com/pires/go-proxyproto"
)

// WriteHeader writes the preface naming dst (and src, for the gateway's
// logs) to w.
func WriteHeader(w io.Writer, src, dst netip.AddrPort) error {
	if !dst.IsValid() {
		return fmt.Errorf("passthrough: invalid destination %v", dst)
	}
	if !src.IsValid() || src.Addr().Is4() != dst.Addr().Is4() {
		// The header carries one family: an unknown or other-family source
		// is sent as the unspecified address of dst's.
		src = netip.AddrPortFrom(unspecified(dst.Addr()), 0)
	}
	h := proxyproto.HeaderProxyFromAddrs(2, net.TCPAddrFromAddrPort(src), net.TCPAddrFromAddrPort(dst))
	_, err := h.WriteTo(w)
	return err
}

func unspecified(a netip.Addr) netip.Addr {
	if a.Is4() {
		return netip.IPv4Unspecified()
	}
	return netip.IPv6Unspecified()
}

// ErrHeader wraps every reason a connection's preface is refused.
var ErrHeader = errors.New("passthrough header")

// Header is what a connection's preface says.
type Header struct {
	// Src and Dst: the client's address (for logs) and the pod it wants.
	Src, Dst netip.AddrPort
	// Health: a health check (the PROXY protocol's LOCAL command, which
	// the specification gives for health checks), not a connection to
	// forward: Src and Dst are zero.
	Health bool
}

// maxHeaderLen bounds the length a header announces past its first 16
// bytes (IPv6 addresses take 36; Plexus sends no TLVs).
const maxHeaderLen = 512

// signature starts every PROXY protocol v2 header.
var signature = []byte("\r\n\r\n\x00\r\nQUIT\n")

// Accept reads c's preface within timeout and returns it. It reads the
// header's bytes exactly (its length is in its first 16), so what follows
// is still c's to read: joined TCP connections can be spliced in the
// kernel. The deadline is cleared on success.
func Accept(c net.Conn, timeout time.Duration) (Header, error) {
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrHeader, err)
	}
	b := make([]byte, 16, 16+maxHeaderLen)
	if _, err := io.ReadFull(c, b); err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrHeader, err)
	}
	if !bytes.Equal(b[:12], signature) {
		return Header{}, fmt.Errorf("%w: no PROXY protocol v2 signature", ErrHeader)
	}
	n := int(binary.BigEndian.Uint16(b[14:16]))
	if n > maxHeaderLen {
		return Header{}, fmt.Errorf("%w: %d bytes announced, at most %d", ErrHeader, n, maxHeaderLen)
	}
	b = b[:16+n]
	if _, err := io.ReadFull(c, b[16:]); err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrHeader, err)
	}
	h, err := proxyproto.Read(bufio.NewReader(bytes.NewReader(b)))
	if err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrHeader, err)
	}
	hdr, err := check(h)
	if err != nil {
		return Header{}, err
	}
	if err := c.SetReadDeadline(time.Time{}); err != nil {
		return Header{}, fmt.Errorf("%w: %w", ErrHeader, err)
	}
	return hdr, nil
}

// check holds h to what Plexus sends.
func check(h *proxyproto.Header) (Header, error) {
	switch {
	case h.Version != 2:
		return Header{}, fmt.Errorf("%w: version %d, want 2", ErrHeader, h.Version)
	case h.Command == proxyproto.LOCAL:
		return Header{Health: true}, nil
	case h.Command != proxyproto.PROXY:
		return Header{}, fmt.Errorf("%w: command %#x, want PROXY or LOCAL", ErrHeader, byte(h.Command))
	case !h.TransportProtocol.IsStream():
		return Header{}, fmt.Errorf("%w: transport %#x, want TCP", ErrHeader, byte(h.TransportProtocol))
	}
	s, sok := h.SourceAddr.(*net.TCPAddr)
	d, dok := h.DestinationAddr.(*net.TCPAddr)
	if !sok || !dok {
		return Header{}, fmt.Errorf("%w: addresses are not TCP", ErrHeader)
	}
	dst := d.AddrPort()
	dst = netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())
	if !dst.Addr().IsValid() || dst.Addr().IsUnspecified() || dst.Port() == 0 {
		return Header{}, fmt.Errorf("%w: destination %v", ErrHeader, dst)
	}
	return Header{Src: s.AddrPort(), Dst: dst}, nil
}

// Probe checks the gateway at gw with dial: it sends a health check and
// expects the gateway to close the connection cleanly before ctx ends. A
// gateway that cannot serve (not ready) resets it instead.
func Probe(ctx context.Context, dial func(context.Context, netip.AddrPort) (net.Conn, error), gw netip.AddrPort) error {
	c, err := dial(ctx, gw)
	if err != nil {
		return err
	}
	defer c.Close()
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(d)
	}
	h := &proxyproto.Header{Version: 2, Command: proxyproto.LOCAL, TransportProtocol: proxyproto.UNSPEC}
	if _, err := h.WriteTo(c); err != nil {
		return err
	}
	if n, err := c.Read(make([]byte, 1)); n > 0 || !errors.Is(err, io.EOF) {
		return fmt.Errorf("gateway %s did not answer its health check (read %d bytes, %v)", gw, n, err)
	}
	return nil
}

// Dial connects to dst with dial: directly when via is zero, else through
// the gateway at via, the header sent.
func Dial(ctx context.Context, dial func(context.Context, netip.AddrPort) (net.Conn, error), via, dst netip.AddrPort) (net.Conn, error) {
	if !via.IsValid() {
		return dial(ctx, dst)
	}
	c, err := dial(ctx, via)
	if err != nil {
		return nil, fmt.Errorf("gateway %s: %w", via, err)
	}
	var src netip.AddrPort
	if a, ok := c.LocalAddr().(*net.TCPAddr); ok {
		src = a.AddrPort()
	}
	if d, ok := ctx.Deadline(); ok {
		_ = c.SetWriteDeadline(d)
	}
	if err := WriteHeader(c, src, dst); err != nil {
		c.Close()
		return nil, fmt.Errorf("gateway %s: sending the header for %s: %w", via, dst, err)
	}
	_ = c.SetWriteDeadline(time.Time{})
	return c, nil
}
