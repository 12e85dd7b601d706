package proxy

import (
	"context"
	"errors"
	"net"
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
// for a mesh ClientHello: mesh mTLS is terminated, a.conn becomes the
// decrypted stream and a.tls says who the client is; other traffic is
// refused under the mtls policy, otherwise kept as is (every peeked byte
// replayed), and made opaque when the client sent nothing decisive in
// time. false means a.conn was closed.
func (p *Proxy) inboundTLS(a *accepted) bool {
	if a.dir != metrics.Inbound || p.tlsConf == nil {
		return true
	}
	c, dir, dst := a.conn, a.dir, a.dst
	m, log := p.opts.Metrics, p.opts.Log
	timeout := p.opts.Config.DetectTimeout
	if p.opts.Config.OpaquePorts.Has(dst.Port()) {
		timeout = min(timeout, OpaquePeekTimeout)
	}
	kind, pc, err := mtls.Peek(c, timeout)
	if err != nil {
		log.Debug("peek failed", "dst", dst, "src", c.RemoteAddr(), "err", err)
		c.Close()
		return false
	}
	if kind == mtls.Mesh {
		ctx, cancel := context.WithTimeout(context.Background(), ConnectTimeout)
		defer cancel()
		tc, id, err := mtls.Server(ctx, pc, p.tlsConf)
		if err != nil {
			m.Refused(metrics.RefusedHandshake)
			log.Info("refused inbound mesh connection: handshake failed", "dst", dst, "src", c.RemoteAddr(), "err", err)
			return false
		}
		a.conn, a.tls = tc, metrics.TLS{On: true, PeerID: m.PeerID(dir, id), ID: id.String()}
		return true
	}
	if p.opts.Config.InboundPolicy == config.PolicyMTLS {
		m.Refused(metrics.RefusedPlaintext)
		log.Debug("refused inbound plaintext connection (inbound policy mtls)", "dst", dst, "src", c.RemoteAddr())
		c.Close()
		return false
	}
	a.conn, a.opaque = pc, a.opaque || kind == mtls.Undecided
	return true
}

// secure runs the mesh mTLS client handshake on c, expecting id.
func (p *Proxy) secure(ctx context.Context, c net.Conn, id spiffe.ID) (net.Conn, error) {
	if p.opts.Certs == nil {
		c.Close()
		return nil, errors.New("mesh mTLS requested without an identity")
	}
	return mtls.Client(ctx, c, p.opts.Certs, id)
}
