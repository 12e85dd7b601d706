package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/mtls"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// OpaquePeekTimeout bounds how long the inbound side waits for a mesh
// ClientHello on an opaque port before forwarding a silent
// (server-speaks-first) plaintext client; a client proxy sends its hello
// right after connecting.
const OpaquePeekTimeout = time.Second

// inboundTLS, for an inbound connection with identity configured, peeks
// for a mesh ClientHello: mesh mTLS is terminated and the decrypted
// stream returned with its client identity; other traffic is refused
// under the mtls policy, otherwise returned as is (every peeked byte
// replayed). undecided means the client sent nothing decisive in time:
// forward it as opaque. ok is false when c was closed.
func (p *Proxy) inboundTLS(c net.Conn, dir string, dst netip.AddrPort) (conn net.Conn, tl metrics.TLS, undecided, ok bool) {
	if dir != metrics.Inbound || p.tlsConf == nil {
		return c, tl, false, true
	}
	m, log := p.opts.Metrics, p.opts.Log
	timeout := p.opts.Config.DetectTimeout
	if p.opts.Config.OpaquePorts.Has(dst.Port()) {
		timeout = min(timeout, OpaquePeekTimeout)
	}
	kind, pc, err := mtls.Peek(c, timeout)
	if err != nil {
		log.Debug("peek failed", "dst", dst, "src", c.RemoteAddr(), "err", err)
		c.Close()
		return nil, tl, false, false
	}
	if kind == mtls.Mesh {
		ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
		defer cancel()
		tc, id, err := mtls.Server(ctx, pc, p.tlsConf)
		if err != nil {
			m.Refused(metrics.RefusedHandshake)
			log.Info("refused inbound mesh connection: handshake failed", "dst", dst, "src", c.RemoteAddr(), "err", err)
			return nil, tl, false, false
		}
		return tc, metrics.TLS{On: true, PeerID: m.PeerID(dir, id), ID: id.String()}, false, true
	}
	if p.opts.Config.InboundPolicy == config.PolicyMTLS {
		m.Refused(metrics.RefusedPlaintext)
		log.Debug("refused inbound plaintext connection (inbound policy mtls)", "dst", dst, "src", c.RemoteAddr())
		c.Close()
		return nil, tl, false, false
	}
	return pc, tl, kind == mtls.Undecided, true
}

// secure runs the mesh mTLS client handshake on c, expecting id.
func (p *Proxy) secure(ctx context.Context, c net.Conn, id spiffe.ID) (net.Conn, error) {
	if p.opts.Certs == nil {
		c.Close()
		return nil, errors.New("mesh mTLS requested without an identity")
	}
	return mtls.Client(ctx, c, p.opts.Certs, id)
}
