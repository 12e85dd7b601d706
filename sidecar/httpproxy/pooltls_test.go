package httpproxy

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/policy/routes"
)

// A pooled mesh TLS connection on which the upstream sent more than the
// response — bytes that end up decrypted inside TLS, not in the socket —
// is not reused: the next request gets its own answer.
func TestPooledTLSConnectionWithStrayDecryptedBytesIsNotReused(t *testing.T) {
	cert := func() tls.Certificate {
		s := httptest.NewTLSServer(http.NotFoundHandler())
		defer s.Close()
		return s.TLS.Certificates[0]
	}()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var served atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					if _, err := readRequest(r); err != nil {
						return
					}
					if served.Add(1) == 1 {
						// The body's last bytes and a stray response share a
						// TLS record: reading the body leaves them inside TLS.
						io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 8000\r\n\r\n"+strings.Repeat("x", 8000)+
							"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\npoisoned")
						continue
					}
					io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfresh")
				}
			}()
		}
	}()
	addr := ln.Addr().(*net.TCPAddr).AddrPort()
	id := spiffe.New("cluster.local", "ns", "sa")
	f := startFast(t, addr, func(o *Options) {
		o.Balance = func(context.Context, netip.AddrPort, *routes.Backend) (Endpoint, error) {
			return Endpoint{Addr: addr, Identity: id}, nil
		}
		o.Secure = func(ctx context.Context, c net.Conn, _ spiffe.ID) (net.Conn, error) {
			tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true})
			return tc, tc.HandshakeContext(ctx)
		}
	})
	c, r := f.dial(t)
	if res, body := get(t, c, r, "GET", ""); res.StatusCode != 200 || len(body) != 8000 {
		t.Fatalf("first request: %d, %d bytes", res.StatusCode, len(body))
	}
	if _, body := get(t, c, r, "GET", ""); body != "fresh" {
		t.Fatalf("second request got %q: a pooled connection delivered another response", body)
	}
}
