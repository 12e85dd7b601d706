package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/plexus-mesh/plexus/cni-plugin/rules"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
	"github.com/plexus-mesh/plexus/testsupport/fakedestination"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

// TestMeshSelfCall: a pod calls itself through its Service. Destination
// balances the Service address to the pod's own endpoint, so the pod's
// proxy dials its own address over mTLS; that connection leaves by lo and
// never passes PREROUTING, and only the self-call rule sends it to the
// proxy's inbound side, which terminates the mTLS and dials the
// application from the inbound source. The applications listen on the
// pod's addresses only. Then, with the rules of a plugin that predates the
// self-call rules, the same call fails as it did before (the ClientHello
// lands on the application), while inbound calls from another pod still
// work with the proxy's bound dials.
func TestMeshSelfCall(t *testing.T) {
	m := newTopology(t, false)
	ca := testpki.New("mesh")
	dest := fakedestination.Serve(m.server.listen(t, "127.0.0.1:8086"), ca, spiffe.New("cluster.local", "plexus-system", "plexus-destination"))
	t.Cleanup(dest.Stop)
	self := startProxy(t, m.server.ns, identityEnv(ca, serverPodID, "PLEXUS_PROXY_DESTINATION_ADDR=127.0.0.1:8086")...)
	// Service addresses: nothing answers there, they leave by the pod's
	// interface as a ClusterIP does before kube-proxy's rules.
	self.ns.Run(t, "ip", "route", "add", "10.96.0.0/16", "dev", "vb")
	self.ns.Run(t, "ip", "-6", "route", "add", "fd00:96::/64", "dev", "vb")
	service := func(svc, endpoint string) string {
		dest.Set(svc, fakedestination.Add(fakedestination.Endpoint(endpoint, serverPodID)))
		return svc
	}
	// inbound and outbound are the proxy's request_total of the mTLS
	// self-calls: as the server (client_id is its own identity) and as
	// the client (server_id is its own identity).
	inbound := func(target string) float64 {
		return sumSamples(self.scrape(t), "request_total", map[string]string{"direction": "inbound", "target_addr": target, "tls": "true", "client_id": serverPodID.String()})
	}
	outbound := func() float64 {
		return sumSamples(self.scrape(t), "request_total", map[string]string{"direction": "outbound", "tls": "true", "server_id": serverPodID.String()})
	}

	httpSelfCall := func(t *testing.T, svc, app string) (code int, reason string) {
		t.Helper()
		res, err := self.httpClient(false).Get("http://" + svc + "/self")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == 200 && string(body) != "self ok" {
			t.Fatalf("GET %s → %s: body %q", svc, app, body)
		}
		return res.StatusCode, res.Header.Get(httpproxy.ErrorHeader)
	}

	t.Run("http", func(t *testing.T) {
		app := serverIP + ":8080"
		rec := &peerRecorder{body: "self ok"}
		srv := &http.Server{Handler: rec}
		go srv.Serve(self.listen(t, app))
		defer srv.Close()
		svc := service("10.96.0.20:80", app)
		const n = 5
		for range n {
			if code, reason := httpSelfCall(t, svc, app); code != 200 {
				t.Fatalf("self-call through %s: %d %s", svc, code, reason)
			}
		}
		if peer := rec.last(); peer != inboundSource {
			t.Errorf("app saw peer %s, want the inbound source %s", peer, inboundSource)
		}
		if got := inbound(app); got != n {
			t.Errorf("inbound request_total{tls=true, client_id=%s, target_addr=%s} = %v, want %d", serverPodID, app, got, n)
		}
		if got := outbound(); got != n {
			t.Errorf("outbound request_total{tls=true, server_id=%s} = %v, want %d", serverPodID, got, n)
		}
	})

	t.Run("opaque", func(t *testing.T) {
		app := serverIP + ":5432" // a default opaque port: no detection on either side
		ln := self.listen(t, app)
		peer := make(chan string, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			peer <- host
			io.WriteString(c, "pg-hello\n") // server speaks first
			b := make([]byte, 4)
			io.ReadFull(c, b)
			io.WriteString(c, "got "+string(b))
		}()
		svc := service("10.96.0.20:5432", app)
		c, err := self.dial(context.Background(), svc)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, len("pg-hello\n"))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "pg-hello\n" {
			t.Fatalf("greeting %q %v", buf, err)
		}
		io.WriteString(c, "PING")
		c.(*net.TCPConn).CloseWrite()
		rest, _ := io.ReadAll(c)
		c.Close()
		if string(rest) != "got PING" {
			t.Fatalf("reply %q", rest)
		}
		if p := <-peer; p != inboundSource {
			t.Errorf("app saw peer %s, want the inbound source %s", p, inboundSource)
		}
		in := map[string]string{"direction": "inbound", "target_addr": app, "peer": "src", "tls": "true", "client_id": serverPodID.String()}
		if got := sumSamples(self.scrape(t), "tcp_open_total", in); got != 1 {
			t.Errorf("tcp_open_total%v = %v, want 1", in, got)
		}
	})

	t.Run("ipv6", func(t *testing.T) {
		app := net.JoinHostPort(serverIP6, "8086")
		rec := &peerRecorder{body: "self ok"}
		srv := &http.Server{Handler: rec}
		go srv.Serve(self.listen(t, app))
		defer srv.Close()
		svc := service("[fd00:96::20]:80", app)
		if code, reason := httpSelfCall(t, svc, app); code != 200 {
			t.Fatalf("self-call through %s: %d %s", svc, code, reason)
		}
		if peer := rec.last(); peer != inboundSource6 {
			t.Errorf("app saw peer %s, want the inbound source %s", peer, inboundSource6)
		}
		if got := inbound(app); got != 1 {
			t.Errorf("inbound request_total{tls=true, client_id=%s, target_addr=%s} = %v, want 1", serverPodID, app, got)
		}
	})

	// Last: it replaces the pod's rules.
	t.Run("old-plugin-rules", func(t *testing.T) {
		for _, v6 := range []bool{false, true} {
			self.ns.Restore(t, v6, oldMeshRules(t, v6))
		}
		app := serverIP + ":8081"
		rec := &peerRecorder{body: "self ok"}
		srv := &http.Server{Handler: rec}
		go srv.Serve(self.listen(t, app))
		defer srv.Close()
		svc := service("10.96.0.21:80", app)
		if code, reason := httpSelfCall(t, svc, app); code != 502 || reason != httpproxy.ReasonTLS {
			t.Errorf("self-call without the self-call rules: %d %s, want 502 %s (the ClientHello reached the app)", code, reason, httpproxy.ReasonTLS)
		}
		// A call from another pod (no proxy there) still reaches the app
		// through the inbound side, whose dial from 127.0.0.6 the proxy-uid
		// rule lets through: a new proxy on an old plugin.
		code, body, err := (&pod{ns: m.client.ns}).getBody(app + "/")
		if err != nil || code != 200 || body != "self ok" {
			t.Fatalf("inbound call with the old rules: %d %q %v", code, body, err)
		}
		if peer := rec.last(); peer != inboundSource {
			t.Errorf("app saw peer %s, want the inbound source %s", peer, inboundSource)
		}
	})
}

// oldMeshRules are the rules of a plugin that predates the self-call
// rules (or of a proxy without podcontract.EnvInboundSource).
func oldMeshRules(t *testing.T, v6 bool) string {
	t.Helper()
	c := podcontract.Defaults()
	if c.ProxyUID != proxyUID || c.ProxyGID != proxyUID {
		t.Fatalf("default proxy UID/GID %d/%d, the tests run the proxy as %d", c.ProxyUID, c.ProxyGID, proxyUID)
	}
	fam := rules.IPv4
	if v6 {
		fam = rules.IPv6
	}
	rs, err := rules.Build(c, fam)
	if err != nil {
		t.Fatal(err)
	}
	return rules.RenderApply(rs, rules.State{})
}

// TestInboundDialBindsTheSource: the inbound dial to a pod address leaves
// from the inbound source of its family with IP_BIND_ADDRESS_NO_PORT set,
// one to loopback or of a family without a source leaves unbound.
func TestInboundDialBindsTheSource(t *testing.T) {
	m := newTopology(t, false)
	p := m.server
	dial := boundDial([]netip.Addr{netip.MustParseAddr(inboundSource)}) // no IPv6 source
	accepted := func(ln net.Listener) chan string {
		peers := make(chan string, 4)
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
				peers <- host
				c.Close()
			}
		}()
		return peers
	}
	for _, tc := range []struct {
		listen, want string
		noPort       bool
	}{
		{serverIP + ":9100", inboundSource, true},
		{"127.0.0.1:9101", "127.0.0.1", false},
		{net.JoinHostPort(serverIP6, "9102"), serverIP6, false},
	} {
		peers := accepted(p.listen(t, tc.listen))
		var c net.Conn
		err := p.ns.Do(func() (err error) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			c, err = dial(ctx, netip.MustParseAddrPort(tc.listen))
			return err
		})
		if err != nil {
			t.Fatalf("dial %s: %v", tc.listen, err)
		}
		noPort, err := getsockoptInt(c.(*net.TCPConn), unix.IP_BIND_ADDRESS_NO_PORT)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := <-peers; got != tc.want {
			t.Errorf("dial %s: peer %s, want %s", tc.listen, got, tc.want)
		}
		if (noPort == 1) != tc.noPort {
			t.Errorf("dial %s: IP_BIND_ADDRESS_NO_PORT = %d, want set: %v", tc.listen, noPort, tc.noPort)
		}
	}
}

// getsockoptInt reads an IPPROTO_IP socket option of c.
func getsockoptInt(c *net.TCPConn, opt int) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var v int
	var serr error
	if err := raw.Control(func(fd uintptr) { v, serr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IP, opt) }); err != nil {
		return 0, err
	}
	return v, serr
}
