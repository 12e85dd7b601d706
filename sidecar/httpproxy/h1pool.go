package httpproxy

import (
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// upstream is one fast-path connection to a destination.
type upstream struct {
	c      net.Conn
	nb     *nbConn // the socket under c (and its TLS); nil if the dialer gave none
	key    poolKey
	rd     *h1reader
	wr     h1writer
	idleAt time.Time
	reused bool
}

func newUpstream(d dialed, writeTimeout time.Duration) *upstream {
	return &upstream{c: d.conn, nb: d.nb, rd: newReader(d.conn, h1ReadBuf), wr: h1writer{c: d.conn, idle: writeTimeout}}
}

func (u *upstream) close() { u.c.Close() }

// clean reports whether an idle connection can carry a new request:
// nothing waits on it — no stray byte of a response nobody asked for, no
// FIN or RST — in our buffer, in the socket, or decrypted inside TLS.
// Checked before every reuse: a stray response would otherwise answer the
// next request, possibly another client's.
func (u *upstream) clean() bool {
	return len(u.rd.buffered()) == 0 && (u.nb == nil || u.nb.quiet(u.c))
}

// poolKey names the upstream connections one request may reuse: same
// address and same mesh identity (zero: plaintext).
type poolKey struct {
	addr netip.AddrPort
	id   spiffe.ID
	via  netip.AddrPort // the gateway the connection went through
}

// h1pool keeps idle fast-path upstream connections, newest first.
type h1pool struct {
	max     int
	timeout time.Duration

	mu       sync.Mutex
	idle     map[poolKey][]*upstream
	sweeping bool
}

// get returns an idle connection for k that still looks usable, or nil.
func (p *h1pool) get(k poolKey) *upstream {
	p.mu.Lock()
	defer p.mu.Unlock()
	list := p.idle[k]
	for len(list) > 0 {
		u := list[len(list)-1]
		list = list[:len(list)-1]
		if (p.timeout > 0 && time.Since(u.idleAt) > p.timeout) || !u.clean() {
			u.close()
			continue
		}
		p.idle[k] = list
		u.reused = true
		return u
	}
	delete(p.idle, k)
	return nil
}

// put keeps u for reuse, or closes it when k's pool is full.
func (p *h1pool) put(k poolKey, u *upstream) {
	u.idleAt = time.Now()
	u.rd.got = 0
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle == nil {
		p.idle = map[poolKey][]*upstream{}
	}
	if len(p.idle[k]) >= p.max {
		u.close()
		return
	}
	p.idle[k] = append(p.idle[k], u)
	if p.timeout > 0 && !p.sweeping {
		p.sweeping = true
		time.AfterFunc(p.timeout, p.sweep)
	}
}

// sweep closes connections idle longer than the timeout and runs again
// while any remain.
func (p *h1pool) sweep() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, list := range p.idle {
		kept := list[:0]
		for _, u := range list {
			if time.Since(u.idleAt) > p.timeout {
				u.close()
			} else {
				kept = append(kept, u)
			}
		}
		if len(kept) == 0 {
			delete(p.idle, k)
		} else {
			p.idle[k] = kept
		}
	}
	p.sweeping = len(p.idle) > 0
	if p.sweeping {
		time.AfterFunc(p.timeout, p.sweep)
	}
}

// closeIdle closes every idle connection.
func (p *h1pool) closeIdle() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, list := range p.idle {
		for _, u := range list {
			u.close()
		}
		delete(p.idle, k)
	}
}

// closeIdleTo closes the idle connections to addrs (endpoints that left
// discovery: their servers are going away).
func (p *h1pool) closeIdleTo(addrs []netip.AddrPort) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, list := range p.idle {
		for _, a := range addrs {
			if k.addr == a {
				for _, u := range list {
					u.close()
				}
				delete(p.idle, k)
				break
			}
		}
	}
}
