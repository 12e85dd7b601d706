package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/tcptest"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

var (
	clientID = spiffe.New("cluster.local", "shop", "web")
	serverID = spiffe.New("cluster.local", "shop", "db")
)

// handshake runs Client on one end of a loopback TCP pair and the peek +
// Server on the other, returning both sides' errors and the client ID the
// server recorded.
func handshake(t *testing.T, client, server CertSource, want spiffe.ID) (cerr, serr error, got spiffe.ID) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			serr = err
			return
		}
		kind, pc, err := Peek(c, time.Second)
		if err != nil || kind != Mesh {
			serr = errors.Join(err, errors.New("peek did not see mesh mTLS"))
			c.Close()
			return
		}
		tc, id, err := Server(ctx, pc, ServerConfig(server))
		if err != nil {
			serr = err
			return
		}
		got = id
		io.Copy(tc, tc) // echo
		tc.Close()
	}()
	raw, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	tc, cerr := Client(ctx, raw, client, want)
	if cerr == nil {
		tc.Write([]byte("ping"))
		tc.CloseWrite()
		b, _ := io.ReadAll(tc)
		if string(b) != "ping" {
			cerr = errors.New("echo failed: " + string(b))
		}
		tc.Close()
	}
	<-done
	return cerr, serr, got
}

func TestMutualTLS(t *testing.T) {
	ca := testpki.New("mesh")
	cerr, serr, got := handshake(t, ca.Source(clientID), ca.Source(serverID), serverID)
	if cerr != nil || serr != nil {
		t.Fatalf("client %v, server %v", cerr, serr)
	}
	if got != clientID {
		t.Errorf("server recorded client %s, want %s", got, clientID)
	}
}

func TestClientRefusesWrongServerIdentity(t *testing.T) {
	ca := testpki.New("mesh")
	cerr, _, _ := handshake(t, ca.Source(clientID), ca.Source(spiffe.New("cluster.local", "evil", "db")), serverID)
	if !errors.Is(cerr, spiffe.ErrMismatch) {
		t.Fatalf("client err = %v, want identity mismatch", cerr)
	}
}

func TestUntrustedChainsRefused(t *testing.T) {
	ca, other := testpki.New("mesh"), testpki.New("other")
	// Server with a certificate from another CA: the client refuses.
	srv := &testpki.Source{Identity: serverID, Pool: ca.Roots(), Cert: other.Leaf(serverID)}
	if cerr, _, _ := handshake(t, ca.Source(clientID), srv, serverID); cerr == nil || !strings.Contains(cerr.Error(), "server certificate") {
		t.Errorf("untrusted server: client err = %v", cerr)
	}
	// Client with a certificate from another CA: the server refuses.
	cl := &testpki.Source{Identity: clientID, Pool: ca.Roots(), Cert: other.Leaf(clientID)}
	if _, serr, _ := handshake(t, cl, ca.Source(serverID), serverID); serr == nil || !strings.Contains(serr.Error(), "client certificate") {
		t.Errorf("untrusted client: server err = %v", serr)
	}
	// A leaf with an extra DNS SAN is not a mesh identity.
	bad := &testpki.Source{Identity: clientID, Pool: ca.Roots(), Cert: ca.LeafWith(clientID, func(c *x509.Certificate) { c.DNSNames = []string{"x"} })}
	if _, serr, _ := handshake(t, bad, ca.Source(serverID), serverID); serr == nil {
		t.Error("leaf with DNS SAN accepted")
	}
}

func TestServerRequiresClientCert(t *testing.T) {
	ca := testpki.New("mesh")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	errc := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			errc <- err
			return
		}
		_, _, err = Server(context.Background(), c, ServerConfig(ca.Source(serverID)))
		errc <- err
	}()
	cfg := ClientConfig(ca.Source(clientID), serverID, ALPN)
	cfg.GetClientCertificate = nil // no certificate
	c, err := tls.Dial("tcp", ln.Addr().String(), cfg)
	if err == nil {
		c.Read(make([]byte, 1)) // TLS 1.3: the server's alert arrives after the client's Finished
		c.Close()
	}
	if err := <-errc; err == nil {
		t.Fatal("server accepted a client without a certificate")
	}
}

// TestPeekLeavesOtherTrafficIntact: plaintext, the application's own TLS
// (no or another ALPN) and silence are not taken for mesh mTLS, and every
// byte read is replayed, so the application's TLS handshake still works
// through the peeked connection.
func TestPeekLeavesOtherTrafficIntact(t *testing.T) {
	ca := testpki.New("app")
	appCert := ca.LeafWith(serverID, func(c *x509.Certificate) { c.DNSNames = []string{"app.example"} })
	for _, tc := range []struct {
		name string
		send func(net.Conn)
		want Kind
	}{
		{"http", func(c net.Conn) { io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n") }, Other},
		{"silence", func(net.Conn) {}, Undecided},
		{"tls-h2", nil, Other},
		{"tls-none", nil, Other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := tcptest.Pair(t)
			var cerr chan error
			if tc.send != nil {
				go tc.send(a)
			} else {
				cerr = make(chan error, 1)
				go func() {
					cfg := &tls.Config{RootCAs: ca.Roots(), ServerName: "app.example"}
					if tc.name == "tls-h2" {
						cfg.NextProtos = []string{"h2", "http/1.1"}
					}
					c := tls.Client(a, cfg)
					err := c.Handshake()
					if err == nil {
						_, err = io.WriteString(c, "hello")
					}
					cerr <- err
				}()
			}
			kind, pc, err := Peek(b, 300*time.Millisecond)
			if err != nil || kind != tc.want {
				t.Fatalf("Peek = %v, %v; want %v", kind, err, tc.want)
			}
			if cerr == nil {
				return
			}
			// The app's server, behind the peek, completes its own handshake.
			s := tls.Server(pc, &tls.Config{Certificates: []tls.Certificate{*appCert}})
			buf := make([]byte, 5)
			if _, err := io.ReadFull(s, buf); err != nil || string(buf) != "hello" {
				t.Fatalf("app TLS through the peek: %q, %v", buf, err)
			}
			if err := <-cerr; err != nil {
				t.Fatal(err)
			}
		})
	}
}

// laterSource has no certificate until ready is closed.
type laterSource struct {
	CertSource
	ready chan struct{}
}

func (s laterSource) Certificate() (*tls.Certificate, error) {
	select {
	case <-s.ready:
		return s.CertSource.Certificate()
	default:
		return nil, errors.New("no certificate yet")
	}
}

// TestWaitForCertificate: it returns once the source has a certificate,
// and when the context ends first, an error carrying both reasons.
func TestWaitForCertificate(t *testing.T) {
	src := laterSource{CertSource: testpki.New("mesh").Source(clientID), ready: make(chan struct{})}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := WaitForCertificate(ctx, src)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no certificate yet") {
		t.Fatalf("without a certificate: %v, want the deadline and the source's reason", err)
	}

	done := make(chan error, 1)
	go func() { done <- WaitForCertificate(context.Background(), src) }()
	select {
	case err := <-done:
		t.Fatalf("returned %v before the certificate", err)
	case <-time.After(3 * certificatePoll):
	}
	close(src.ready)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("still waiting 5s after the certificate came")
	}
}
