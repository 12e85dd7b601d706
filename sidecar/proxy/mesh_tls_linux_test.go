package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/discovery"
	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
	"github.com/plexus-mesh/plexus/testsupport/fakedestination"
	"github.com/plexus-mesh/plexus/testsupport/netnstest"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

// Test-only variables of the child proxy: its certificate chain and key
// (PEM, inline) stand in for the identity service, and the delay before
// the "identity service" hands the certificate out.
const (
	envTestCert      = "PLEXUS_PROXY_TEST_CERT"
	envTestKey       = "PLEXUS_PROXY_TEST_KEY"
	envTestCertDelay = "PLEXUS_PROXY_TEST_CERT_DELAY"
)

// childIdentity is the child proxy's NewIdentity: a fixed certificate
// from the test (mesh/identity/certify is not in this build).
func childIdentity(cfg config.Config, _ *slog.Logger) (Identity, error) {
	cert, err := tls.X509KeyPair([]byte(os.Getenv(envTestCert)), []byte(os.Getenv(envTestKey)))
	if err != nil {
		return nil, fmt.Errorf("test certificate: %w", err)
	}
	roots, err := cfg.TrustAnchors()
	if err != nil {
		return nil, err
	}
	var delay time.Duration
	if v := os.Getenv(envTestCertDelay); v != "" {
		if delay, err = time.ParseDuration(v); err != nil {
			return nil, err
		}
	}
	return &testIdentity{id: cfg.ID(), roots: roots, cert: &cert, readyAt: time.Now().Add(delay)}, nil
}

type testIdentity struct {
	id      spiffe.ID
	roots   *x509.CertPool
	cert    *tls.Certificate
	readyAt time.Time
}

func (i *testIdentity) Run(ctx context.Context) error { <-ctx.Done(); return nil }
func (i *testIdentity) ID() spiffe.ID                 { return i.id }
func (i *testIdentity) Roots() *x509.CertPool         { return i.roots }
func (i *testIdentity) Ready() error {
	if time.Now().Before(i.readyAt) {
		return errors.New("identity service unreachable (test delay)")
	}
	return nil
}
func (i *testIdentity) Certificate() (*tls.Certificate, error) {
	if err := i.Ready(); err != nil {
		return nil, err
	}
	return i.cert, nil
}

// identityEnv is the environment giving a proxy identity id from ca.
func identityEnv(ca *testpki.CA, id spiffe.ID, extra ...string) []string {
	chain, key := testpki.PEM(ca.Leaf(id))
	return append([]string{
		"PLEXUS_PROXY_IDENTITY_ADDR=identity.invalid:8080",
		"PLEXUS_PROXY_POD_NAMESPACE=" + id.Namespace,
		"PLEXUS_PROXY_SERVICE_ACCOUNT=" + id.ServiceAccount,
		"PLEXUS_PROXY_TRUST_ANCHORS=" + string(ca.AnchorPEM()),
		envTestCert + "=" + string(chain),
		envTestKey + "=" + string(key),
	}, extra...)
}

// sniffer records the TCP payloads crossing an interface in a namespace
// (AF_PACKET), to prove what is on the wire.
type sniffer struct {
	fd     int
	mu     sync.Mutex
	segs   map[[2]uint16][]byte // TCP payload by {source port, destination port}
	read   uint64               // frames taken off the socket and recorded
	queued uint64               // frames the kernel queued to the socket, as drain last saw
	done   chan struct{}
}

// sniff captures IPv4 TCP payloads on dev in ns.
func sniff(t *testing.T, ns *netnstest.NS, dev string) *sniffer {
	t.Helper()
	s := &sniffer{segs: map[[2]uint16][]byte{}, done: make(chan struct{})}
	err := ns.Do(func() error {
		ifi, err := net.InterfaceByName(dev)
		if err != nil {
			return err
		}
		proto := int(htons(unix.ETH_P_ALL))
		fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, proto)
		if err != nil {
			return err
		}
		s.fd = fd
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 100000}); err != nil {
			return err
		}
		return unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: ifi.Index})
	})
	if err != nil {
		t.Fatalf("packet socket: %v", err)
	}
	stop := make(chan struct{})
	go func() {
		defer close(s.done)
		buf := make([]byte, 65536)
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, _, err := unix.Recvfrom(s.fd, buf, 0)
			if err != nil {
				continue
			}
			s.record(buf[:n])
			s.mu.Lock()
			s.read++
			s.mu.Unlock()
		}
	}()
	t.Cleanup(func() { close(stop); <-s.done; unix.Close(s.fd) })
	return s
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// record keeps the TCP payload of an IPv4 Ethernet frame.
func (s *sniffer) record(f []byte) {
	if len(f) < 14+20 || binary.BigEndian.Uint16(f[12:14]) != 0x0800 {
		return
	}
	ip := f[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != 6 || len(ip) < ihl+20 {
		return
	}
	total := int(binary.BigEndian.Uint16(ip[2:4]))
	if total > len(ip) {
		total = len(ip)
	}
	tcp := ip[ihl:total]
	off := int(tcp[12]>>4) * 4
	if len(tcp) < off {
		return
	}
	payload := tcp[off:]
	if len(payload) == 0 {
		return
	}
	sport, dport := binary.BigEndian.Uint16(tcp[0:2]), binary.BigEndian.Uint16(tcp[2:4])
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]uint16{sport, dport}
	s.segs[k] = append(s.segs[k], payload...)
}

// drain waits until the capture has recorded every frame the kernel
// queued to its socket so far: every segment that crossed the interface
// before the call. PACKET_STATISTICS counts the frames queued (and
// dropped) since it was last read.
func (s *sniffer) drain(t *testing.T) {
	t.Helper()
	waitFor(t, "the capture to record every frame queued to it", func() bool {
		st, err := unix.GetsockoptTpacketStats(s.fd, unix.SOL_PACKET, unix.PACKET_STATISTICS)
		if err != nil {
			t.Fatalf("PACKET_STATISTICS: %v", err)
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		s.queued += uint64(st.Packets - st.Drops)
		return s.read >= s.queued
	})
}

// wire returns the captured one-way streams to or from port.
func (s *sniffer) wire(port uint16) [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out [][]byte
	for k, b := range s.segs {
		if k[0] == port || k[1] == port {
			out = append(out, append([]byte(nil), b...))
		}
	}
	return out
}

// onlyTLS checks that each captured one-way stream is a sequence of
// whole TLS records and that no secret appears in any.
func onlyTLS(t *testing.T, what string, streams [][]byte, secrets ...string) {
	t.Helper()
	if len(streams) < 2 {
		t.Errorf("%s: %d one-way streams captured, want both directions", what, len(streams))
	}
	for _, b := range streams {
		for _, sec := range secrets {
			if strings.Contains(string(b), sec) {
				t.Errorf("%s: plaintext %q on the wire", what, sec)
			}
		}
		for i := 0; i < len(b); {
			if len(b)-i < 5 || b[i] < 0x14 || b[i] > 0x17 || b[i+1] != 3 {
				t.Errorf("%s: byte %d of %d is not a TLS record header: % x", what, i, len(b), b[i:min(i+8, len(b))])
				break
			}
			i += 5 + int(binary.BigEndian.Uint16(b[i+3:i+5]))
		}
	}
}

// newMTLSMesh builds the two pods with identities from one CA: the
// client proxy asks a destination server (on the client pod's loopback:
// the proxy's own dials there are not redirected) where to send traffic.
// Both proxies get env; the server proxy, started first and not waited
// for, also serverEnv.
func newMTLSMesh(t testing.TB, env []string, serverEnv ...string) (*mesh, *fakedestination.Server) {
	t.Helper()
	m, dest, _ := newMTLSMeshCA(t, env, serverEnv...)
	return m, dest
}

// newMTLSMeshCA is newMTLSMesh that also returns the mesh's CA.
func newMTLSMeshCA(t testing.TB, env []string, serverEnv ...string) (*mesh, *fakedestination.Server, *testpki.CA) {
	t.Helper()
	m := newTopology(t, false)
	ca := testpki.New("mesh")
	dest := fakedestination.Serve(m.client.listen(t, "127.0.0.1:8086"), ca, spiffe.New("cluster.local", "plexus-system", "plexus-destination"))
	t.Cleanup(dest.Stop)
	m.server = launchProxy(t, m.server.ns, true, identityEnv(ca, serverPodID, append(env, serverEnv...)...)...)
	m.client = startProxy(t, m.client.ns, identityEnv(ca, clientPodID, append(env, "PLEXUS_PROXY_DESTINATION_ADDR=127.0.0.1:8086")...)...)
	return m, dest, ca
}

// TestMeshMTLS: two meshed pods with identities; the client proxy asks a
// destination server (in its own namespace) where to send traffic and
// originates mTLS; the server proxy terminates it. The veth between them
// carries only TLS records; metrics name both identities.
func TestMeshMTLS(t *testing.T) {
	// The server proxy gets its certificate 1.5 s after start.
	m, dest := newMTLSMesh(t, nil, envTestCertDelay+"=1500ms")
	ep := func(port int, id spiffe.ID) string {
		path := fmt.Sprintf("%s:%d", serverIP, port)
		dest.Set(path, fakedestination.Add(fakedestination.Endpoint(path, id)))
		return path
	}
	wire := sniff(t, m.server.ns, "vb")
	code, body, err := m.server.adminBody("/ready")
	if err != nil || code != 503 || !strings.Contains(body, "no certificate yet") {
		t.Errorf("/ready before the certificate = %d %q %v, want 503 naming the certificate", code, body, err)
	}
	waitFor(t, "server proxy ready after its certificate", func() bool {
		code, _, err := m.server.adminBody("/ready")
		return err == nil && code == 200
	})

	t.Run("http1", func(t *testing.T) {
		tgt := ep(8080, serverPodID)
		rec := &peerRecorder{body: "secret-response-body"}
		srv := &http.Server{Handler: rec}
		go srv.Serve(m.server.listen(t, ":8080"))
		defer srv.Close()
		c := m.client.httpClient(false)
		for range 3 {
			res, err := c.Get("http://" + tgt + "/secret-request-path")
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != 200 || string(b) != "secret-response-body" {
				t.Fatalf("got %d %q (%s)", res.StatusCode, b, res.Header.Get(httpproxy.ErrorHeader))
			}
		}
		if peer := rec.last(); peer != inboundSource {
			t.Errorf("app saw peer %s, want the server proxy's inbound source %s", peer, inboundSource)
		}
		wire.drain(t)
		onlyTLS(t, "veth traffic on 8080", wire.wire(8080), "secret-request-path", "secret-response-body", "HTTP/1.1")
		out := map[string]string{"direction": "outbound", "target_addr": tgt, "tls": "true", "server_id": serverPodID.String(), "client_id": ""}
		in := map[string]string{"direction": "inbound", "target_addr": tgt, "tls": "true", "client_id": clientPodID.String(), "server_id": ""}
		if got := sumSamples(m.client.scrape(t), "request_total", out); got != 3 {
			t.Errorf("client proxy request_total%v = %v, want 3", out, got)
		}
		if got := sumSamples(m.server.scrape(t), "request_total", in); got != 3 {
			t.Errorf("server proxy request_total%v = %v, want 3", in, got)
		}
		if got := sumSamples(m.server.scrape(t), "tcp_open_total", map[string]string{"direction": "inbound", "peer": "src", "tls": "true", "client_id": clientPodID.String()}); got < 1 {
			t.Errorf("server proxy tcp_open_total{src, tls, client_id} = %v", got)
		}
		if got := sumSamples(m.client.scrape(t), "tcp_open_total", map[string]string{"direction": "outbound", "peer": "dst", "tls": "true", "server_id": serverPodID.String()}); got < 1 {
			t.Errorf("client proxy tcp_open_total{dst, tls, server_id} = %v", got)
		}
	})

	t.Run("grpc", func(t *testing.T) {
		tgt := ep(9090, serverPodID)
		hs := health.NewServer()
		hs.SetServingStatus("web", healthpb.HealthCheckResponse_SERVING)
		gs := grpc.NewServer()
		healthpb.RegisterHealthServer(gs, hs)
		go gs.Serve(m.server.listen(t, ":9090"))
		defer gs.Stop()
		cc, err := grpc.NewClient("passthrough:///"+tgt, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithContextDialer(m.client.dial))
		if err != nil {
			t.Fatal(err)
		}
		defer cc.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		for range 2 {
			res, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{Service: "web"})
			if err != nil || res.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Fatalf("health = %v, %v", res, err)
			}
		}
		wire.drain(t)
		onlyTLS(t, "veth traffic on 9090", wire.wire(9090), "grpc.health")
		waitFor(t, "gRPC responses counted with identities", func() bool {
			return sumSamples(m.client.scrape(t), "response_total", map[string]string{"target_addr": tgt, "grpc_status": "0", "tls": "true", "server_id": serverPodID.String()}) == 2 &&
				sumSamples(m.server.scrape(t), "response_total", map[string]string{"target_addr": tgt, "grpc_status": "0", "tls": "true", "client_id": clientPodID.String()}) == 2
		})
	})

	t.Run("wrong-server-identity", func(t *testing.T) {
		tgt := ep(8087, spiffe.New("cluster.local", "shop", "someone-else"))
		reached := make(chan struct{}, 1)
		srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) { reached <- struct{}{} })}
		go srv.Serve(m.server.listen(t, ":8087"))
		defer srv.Close()
		res, err := m.client.httpClient(false).Get("http://" + tgt + "/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 502 || res.Header.Get(httpproxy.ErrorHeader) != httpproxy.ReasonTLS {
			t.Errorf("got %d %s=%q, want 502 %s", res.StatusCode, httpproxy.ErrorHeader, res.Header.Get(httpproxy.ErrorHeader), httpproxy.ReasonTLS)
		}
		select {
		case <-reached:
			t.Error("the app was reached although the server proved the wrong identity")
		default:
		}
	})

	t.Run("no-endpoints", func(t *testing.T) {
		path := fmt.Sprintf("%s:%d", serverIP, 8088)
		dest.Set(path, fakedestination.NoEndpoints(true))
		res, err := m.client.httpClient(false).Get("http://" + path + "/")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 503 || res.Header.Get(httpproxy.ErrorHeader) != httpproxy.ReasonNoEndpoints {
			t.Errorf("got %d %q, want 503 %s", res.StatusCode, res.Header.Get(httpproxy.ErrorHeader), httpproxy.ReasonNoEndpoints)
		}
	})

	t.Run("opaque-over-mtls", func(t *testing.T) {
		tgt := ep(5432, serverPodID) // a default opaque port: no detection on either side
		ln := m.server.listen(t, ":5432")
		go func() {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
			io.WriteString(c, "secret-greeting\n") // server speaks first
			b := make([]byte, 4)
			io.ReadFull(c, b)
			io.WriteString(c, "got "+string(b))
		}()
		c, err := m.client.dial(context.Background(), tgt)
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, len("secret-greeting\n"))
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "secret-greeting\n" {
			t.Fatalf("greeting %q %v", buf, err)
		}
		io.WriteString(c, "PING")
		c.(*net.TCPConn).CloseWrite() // the half-close crosses both proxies and the TLS hop
		rest, _ := io.ReadAll(c)
		c.Close()
		if string(rest) != "got PING" {
			t.Fatalf("reply %q", rest)
		}
		wire.drain(t)
		onlyTLS(t, "veth traffic on 5432", wire.wire(5432), "secret-greeting", "PING")
		if got := sumSamples(m.server.scrape(t), "tcp_open_total", map[string]string{"direction": "inbound", "target_addr": tgt, "peer": "src", "tls": "true", "client_id": clientPodID.String()}); got != 1 {
			t.Errorf("server proxy tcp_open_total{src, tls, client_id} = %v", got)
		}
		if got := sumSamples(m.client.scrape(t), "tcp_open_total", map[string]string{"direction": "outbound", "target_addr": tgt, "peer": "dst", "tls": "true", "server_id": serverPodID.String()}); got != 1 {
			t.Errorf("client proxy tcp_open_total{dst, tls, server_id} = %v", got)
		}
	})

	t.Run("app-tls-inside-mtls", func(t *testing.T) {
		ep(8443, serverPodID)
		appTLSRoundTrip(t, m, 8443)
	})

	t.Run("scale-up-spreads-per-request", func(t *testing.T) {
		ips := []string{serverIP, "10.250.5.3", "10.250.5.4"}
		for _, ip := range ips[1:] {
			m.server.ns.Run(t, "ip", "addr", "add", ip+"/24", "dev", "vb")
		}
		var mu sync.Mutex
		hits := map[string]int{}
		for _, ip := range ips {
			srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				hits[ip]++
				mu.Unlock()
			})}
			go srv.Serve(m.server.listen(t, ip+":8090"))
			defer srv.Close()
		}
		svc := "10.96.0.10:80" // a ClusterIP: nothing routes it, only destination knows it
		m.client.ns.Run(t, "ip", "route", "add", "10.96.0.0/16", "dev", "va")
		dest.Set(svc, fakedestination.Add(fakedestination.Endpoint(serverIP+":8090", serverPodID)))
		c := m.client.httpClient(false) // one keep-alive connection to the client proxy
		get := func() {
			res, err := c.Get("http://" + svc + "/")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != 200 {
				t.Fatalf("status %d %s", res.StatusCode, res.Header.Get(httpproxy.ErrorHeader))
			}
		}
		snapshot := func() map[string]int {
			mu.Lock()
			defer mu.Unlock()
			out := map[string]int{}
			for k, v := range hits {
				out[k] = v
			}
			return out
		}
		for range 5 {
			get()
		}
		if h := snapshot(); h[serverIP] != 5 || len(h) != 1 {
			t.Fatalf("one endpoint: hits %v", h)
		}
		dest.Push(svc, fakedestination.Add(fakedestination.Endpoint(ips[1]+":8090", serverPodID), fakedestination.Endpoint(ips[2]+":8090", serverPodID)))
		t0 := time.Now()
		for {
			get()
			h := snapshot()
			if h[ips[1]] > 0 && h[ips[2]] > 0 {
				t.Logf("keep-alive client reached all three endpoints %s after the scale-up", time.Since(t0))
				break
			}
			if time.Since(t0) > time.Second {
				t.Fatalf("not spread within 1s: %v", h)
			}
		}
		dest.Push(svc, fakedestination.Remove(fakedestination.Endpoint(ips[1]+":8090", spiffe.ID{})))
		waitFor(t, "the client proxy's balancer to drop "+ips[1], func() bool {
			return slices.Equal(m.client.endpointAddrs(t, svc), []string{ips[0] + ":8090", ips[2] + ":8090"})
		})
		before := snapshot()
		for range 12 {
			get()
		}
		// The removed endpoint takes none; which of the two left takes
		// each is the balancer's (of two, peak EWMA can give one all 12).
		after := snapshot()
		if after[ips[1]] != before[ips[1]] || after[ips[0]]+after[ips[2]] != before[ips[0]]+before[ips[2]]+12 {
			t.Errorf("after removing %s: hits went %v → %v; want the 12 on the other two", ips[1], before, after)
		}
	})

	// Last: it stops destination.
	t.Run("destination-down", func(t *testing.T) {
		srv := &http.Server{Handler: &peerRecorder{body: "ok"}}
		go srv.Serve(m.server.listen(t, ":8091"))
		defer srv.Close()
		known := ep(8091, serverPodID)
		get := func(url string) int {
			res, err := m.client.httpClient(false).Get(url)
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			return res.StatusCode
		}
		if code := get("http://" + known + "/"); code != 200 {
			t.Fatalf("before: %d", code)
		}
		dest.Stop()
		// Known destination: served from the cache, still over mTLS.
		before := sumSamples(m.server.scrape(t), "request_total", map[string]string{"target_addr": known, "tls": "true"})
		if code := get("http://" + known + "/"); code != 200 {
			t.Errorf("cached destination with destination down: %d", code)
		}
		if got := sumSamples(m.server.scrape(t), "request_total", map[string]string{"target_addr": known, "tls": "true"}); got != before+1 {
			t.Errorf("cached request not over mTLS: %v → %v", before, got)
		}
		// Unknown destination, nothing cached: the original destination, plaintext.
		srv2 := &http.Server{Handler: &peerRecorder{body: "ok"}}
		go srv2.Serve(m.server.listen(t, ":8092"))
		defer srv2.Close()
		if code := get(fmt.Sprintf("http://%s:8092/", serverIP)); code != 200 {
			t.Errorf("uncached destination with destination down: %d", code)
		}
		if got := sumSamples(m.client.scrape(t), "destination_lookups_total", map[string]string{"result": "unavailable"}); got < 1 {
			t.Errorf("destination_lookups_total{unavailable} = %v", got)
		}
		if got := sumSamples(m.server.scrape(t), "request_total", map[string]string{"target_addr": serverIP + ":8092", "tls": "false"}); got != 1 {
			t.Errorf("fallback request_total{tls=false} = %v", got)
		}
	})
}

// appTLSRoundTrip runs the application's own TLS (its own CA, ALPN h2 or
// none) from the client pod to a server app on port through the proxies.
func appTLSRoundTrip(t *testing.T, m *mesh, port int) {
	t.Helper()
	appCA := testpki.New("app")
	cert := appCA.LeafWith(spiffe.New("app", "x", "y"), func(c *x509.Certificate) { c.DNSNames = []string{"app.example"} })
	ln := tls.NewListener(m.server.listen(t, fmt.Sprintf(":%d", port)), &tls.Config{Certificates: []tls.Certificate{*cert}, NextProtos: []string{"h2", "http/1.1"}})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	raw, err := m.client.dial(context.Background(), fmt.Sprintf("%s:%d", serverIP, port))
	if err != nil {
		t.Fatal(err)
	}
	c := tls.Client(raw, &tls.Config{RootCAs: appCA.Roots(), ServerName: "app.example", NextProtos: []string{"h2"}})
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "app-tls-hello"); err != nil {
		t.Fatalf("app TLS through the proxies: %v", err)
	}
	buf := make([]byte, len("app-tls-hello"))
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "app-tls-hello" {
		t.Fatalf("app TLS echo: %q %v", buf, err)
	}
	if p := c.ConnectionState().NegotiatedProtocol; p != "h2" {
		t.Errorf("app negotiated %q with its own server, want h2", p)
	}
}

// TestMeshPlaintextClient: a pod without identity reaches a meshed server
// in permissive mode (as plaintext, counted tls="false"), including the
// app's own TLS passed through as opaque; with the mtls policy the server
// proxy refuses it.
func TestMeshPlaintextClient(t *testing.T) {
	m := newTopology(t, false)
	ca := testpki.New("mesh")
	m.client = startProxy(t, m.client.ns)
	server := startProxy(t, m.server.ns, identityEnv(ca, serverPodID)...)
	m.server = server
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "plain ok") })}
	go srv.Serve(m.server.listen(t, ":8080"))
	defer srv.Close()
	tgt := serverIP + ":8080"
	res, err := m.client.httpClient(false).Get("http://" + tgt + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "plain ok" {
		t.Fatalf("permissive: %d %q", res.StatusCode, b)
	}
	if got := sumSamples(m.server.scrape(t), "request_total", map[string]string{"direction": "inbound", "target_addr": tgt, "tls": "false", "client_id": ""}); got != 1 {
		t.Errorf("server request_total{tls=false} = %v", got)
	}
	appTLSRoundTrip(t, m, 8443)

	// The same server pod with the mtls policy.
	server.cmd.Process.Kill()
	<-server.exit
	server.exit <- nil
	strict := startProxy(t, m.server.ns, identityEnv(ca, serverPodID, "PLEXUS_PROXY_INBOUND_POLICY=mtls")...)
	res, err = m.client.httpClient(false).Get("http://" + tgt + "/")
	if err == nil {
		res.Body.Close()
		if res.StatusCode != 502 {
			t.Errorf("mtls policy, plaintext client: %d, want 502 from the client proxy", res.StatusCode)
		}
	}
	if got := sumSamples(strict.scrape(t), "inbound_refused_total", map[string]string{"reason": "plaintext"}); got < 1 {
		t.Errorf("inbound_refused_total{plaintext} = %v", got)
	}
	if got := sumSamples(strict.scrape(t), "request_total", nil); got != 0 {
		t.Errorf("strict server forwarded %v requests", got)
	}
	// The admin port stays reachable in plaintext (not redirected).
	if code, _, err := (&pod{ns: m.client.ns}).getBody(serverIP + ":4191/ready"); err != nil || code != 200 {
		t.Errorf("admin port under mtls policy: %d %v", code, err)
	}
}

// adminBody GETs an admin path and returns status and body.
// endpointAddrs are the addresses in the proxy's balancer for dst, from
// its /endpoints.
func (p *pod) endpointAddrs(t *testing.T, dst string) []string {
	t.Helper()
	code, body, err := p.adminBody("/endpoints")
	if err != nil || code != 200 {
		t.Fatalf("/endpoints: %d %v", code, err)
	}
	var sets []discovery.EndpointSet
	if err := json.Unmarshal([]byte(body), &sets); err != nil {
		t.Fatalf("/endpoints: %v", err)
	}
	var addrs []string
	for _, set := range sets {
		if set.Destination == dst {
			for _, ep := range set.Endpoints {
				addrs = append(addrs, ep.Addr)
			}
		}
	}
	return addrs
}

func (p *pod) adminBody(path string) (int, string, error) {
	return p.getBody("127.0.0.1:4191" + path)
}

func (p *pod) getBody(hostPath string) (int, string, error) {
	res, err := p.adminClient().Get("http://" + hostPath)
	if err != nil {
		return 0, "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, string(b), err
}
