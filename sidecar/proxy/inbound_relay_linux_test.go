package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/testsupport/netnstest"
)

// TestInboundRefusesForeignDestinations proves that the inbound listener is
// not an open relay. A client routes traffic for 10.250.77.7, an address
// the server pod does not hold, via the server pod; the server's PREROUTING
// REDIRECT hands it to the server proxy with that original destination.
// 10.250.77.7 really exists, in a third namespace "elsewhere" behind the
// server, with an HTTP server the server proxy demonstrably can reach
// (checked first, through the server proxy's own outbound side: same
// process, UID and routing table an inbound relay would dial with). So the
// only thing between the client and "elsewhere" is the inbound check.
//
// It shows that, for a client without a sidecar (raw TCP) and for a meshed
// client (through its proxy), the server proxy closes the connection
// without a byte of response, "elsewhere" accepts nothing, and the server
// proxy counts inbound_refused_total{reason="not-pod-address"}; and that a
// request to the server's own address still gets its 200.
func TestInboundRefusesForeignDestinations(t *testing.T) {
	const (
		foreign  = "10.250.77.7"
		refused  = "inbound_refused_total"
		bodyAway = "elsewhere"
		bodyHome = "server"
	)
	reason := map[string]string{"reason": "not-pod-address"}
	m := newMesh(t)

	// elsewhere ↔ server on 10.250.6.0/24. Veth names the ends va (server
	// side) and vb (elsewhere side); the server's vb is its link to the client.
	elsewhere := netnstest.New(t, "elsewhere")
	netnstest.Veth(t, m.server.ns, "10.250.6.1/24", elsewhere, "10.250.6.2/24")
	elsewhere.Run(t, "ip", "addr", "add", foreign+"/32", "dev", "vb")
	m.server.ns.Run(t, "ip", "route", "add", foreign+"/32", "via", "10.250.6.2")
	// The client sends whatever it addresses to the foreign address to the
	// server pod, as any host on the pod network can.
	m.client.ns.Run(t, "ip", "route", "add", foreign+"/32", "via", serverIP, "dev", "va")
	// Port 9090 to the foreign address skips the client proxy, so the client
	// acts as a pod without a sidecar (--noflush: added to the mesh rules).
	bypass := m.client.ns.Command("iptables-restore", "--noflush")
	bypass.Stdin = strings.NewReader("*nat\n-I PLEXUS_OUTPUT 1 -p tcp -d " + foreign + " --dport 9090 -j RETURN\nCOMMIT\n")
	if out, err := bypass.CombinedOutput(); err != nil {
		t.Fatalf("iptables-restore --noflush in %s: %v: %s", m.client.ns.Name, err, out)
	}

	away := &pod{ns: elsewhere}
	awayConns := serveCounting(t, bodyAway, away.listen(t, ":8080"), away.listen(t, ":9090"))
	homeConns := serveCounting(t, bodyHome, m.server.listen(t, ":8080"))

	// get returns the status and body of a GET from inside p's namespace
	// (through p's proxy), or the error.
	get := func(p *pod, url string) (int, string, error) {
		res, err := p.httpClient(false).Get(url)
		if err != nil {
			return 0, "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		return res.StatusCode, string(b), err
	}
	refusals := func() float64 { return sumSamples(m.server.scrape(t), refused, reason) }

	// Reachability: a relay would have landed in "elsewhere".
	if code, body, err := get(m.server, "http://"+foreign+":8080/"); err != nil || code != 200 || body != bodyAway {
		t.Fatalf("server pod → %s:8080 = %d %q, %v; want 200 %q (the relay target must be reachable for this test to mean anything)", foreign, code, body, err, bodyAway)
	}
	reached := awayConns.Load()
	before := refusals()

	t.Run("unmeshed-client", func(t *testing.T) {
		c, err := m.client.dial(t.Context(), foreign+":9090")
		if err != nil {
			t.Fatalf("dial %s:9090: %v (the server kernel accepts for the proxy, so the dial must succeed)", foreign, err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		_, werr := io.WriteString(c, "GET / HTTP/1.1\r\nHost: "+foreign+":9090\r\nConnection: close\r\n\r\n")
		got, rerr := io.ReadAll(c)
		if len(got) != 0 {
			t.Fatalf("read %q from a connection to a foreign destination; want nothing", got)
		}
		for _, err := range []error{werr, rerr} {
			if err != nil && !errors.Is(err, syscall.ECONNRESET) && !errors.Is(err, syscall.EPIPE) {
				t.Fatalf("want EOF or reset, got %v", err)
			}
		}
		if got := refusals() - before; got != 1 {
			t.Errorf("%s%v rose by %v, want 1", refused, reason, got)
		}
	})

	t.Run("meshed-client", func(t *testing.T) {
		before := refusals()
		code, body, err := get(m.client, "http://"+foreign+":8080/")
		if err == nil && (code != http.StatusBadGateway || strings.Contains(body, bodyAway)) {
			t.Fatalf("GET %s:8080 through the client proxy = %d %q; want 502 (or a closed connection)", foreign, code, body)
		}
		if got := refusals() - before; got < 1 {
			t.Errorf("%s%v rose by %v, want ≥ 1", refused, reason, got)
		}
	})

	if got := awayConns.Load() - reached; got != 0 {
		t.Errorf(`"elsewhere" accepted %d connections from the foreign-destination cases; the server proxy relayed`, got)
	}
	if got := homeConns.Load(); got != 0 {
		t.Errorf("the server's own :8080 accepted %d connections from the foreign-destination cases", got)
	}

	t.Run("own-address-still-served", func(t *testing.T) {
		before := refusals()
		if code, body, err := get(m.client, "http://"+serverIP+":8080/"); err != nil || code != 200 || body != bodyHome {
			t.Fatalf("GET %s:8080 = %d %q, %v; want 200 %q", serverIP, code, body, err, bodyHome)
		}
		if got := refusals() - before; got != 0 {
			t.Errorf("%s%v rose by %v for a request to the pod's own address", refused, reason, got)
		}
	})
}

// serveCounting serves body on every listener until the test ends and
// returns the number of connections accepted so far.
func serveCounting(t *testing.T, body string, lns ...net.Listener) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, body) }),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				n.Add(1)
			}
		},
	}
	for _, ln := range lns {
		go srv.Serve(ln)
	}
	t.Cleanup(func() { srv.Close() })
	return &n
}
