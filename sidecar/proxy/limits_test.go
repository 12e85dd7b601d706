package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/config"
	"github.com/plexus-mesh/plexus/sidecar/httpproxy"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// refused reports whether a new connection to addr is closed by the proxy
// without a byte, and is not served.
func refused(t *testing.T, addr string) bool {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return true
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	io.WriteString(c, "GET / HTTP/1.1\r\nHost: svc\r\n\r\n")
	n, err := c.Read(make([]byte, 1))
	var ne net.Error
	return n == 0 && err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func TestConnectionCapRefusesNewConnectionsAndKeepsTheOpenOnes(t *testing.T) {
	up := serveLoopback(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "ok")
	})})
	h := start(t, func(c *config.Config, _ *Options) { c.MaxConnections = 2 })
	h.to(up)
	url := "http://" + up + "/"
	// Two HTTP/1 clients, each holding one keep-alive connection (a body
	// read to its end keeps it).
	a, b := h.client(false), h.client(false)
	for _, c := range []*http.Client{a, b} {
		if err := getOK(c, url); err != nil {
			t.Fatalf("under the cap: %v", err)
		}
	}
	if !refused(t, h.addr) {
		t.Fatal("a third connection was served over a cap of 2")
	}
	if n := h.metric(t, "limit_exceeded_total", map[string]string{"direction": "outbound", "limit": metrics.LimitConnections}); n != 1 {
		t.Errorf("limit_exceeded_total{limit=connections} = %v, want 1", n)
	}
	for _, c := range []*http.Client{a, b} {
		if err := getOK(c, url); err != nil {
			t.Fatalf("an open connection stopped working at the cap: %v", err)
		}
	}
	if n := h.metric(t, "tcp_open_total", map[string]string{"peer": "src"}); n != 2 {
		t.Errorf("%v client connections served, want the 2 kept-alive ones", n)
	}
	// A closed connection gives its slot back.
	a.CloseIdleConnections()
	waitFor(t, "a slot freed by a closed connection", func() bool { return !refused(t, h.addr) })
}

func TestConnectionCapCountsConnectionsHandedToTheHTTPServer(t *testing.T) {
	up := serveLoopback(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), Protocols: h2cOnly()})
	h := start(t, func(c *config.Config, _ *Options) { c.MaxConnections = 1 })
	h.to(up)
	c := h.client(true) // h2c: served by net/http's server, not the fast path
	res, err := c.Get("http://" + up + "/")
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("h2c under the cap: %v %v", res, err)
	}
	res.Body.Close()
	if !refused(t, h.addr) {
		t.Fatal("a second connection was served over a cap of 1 while the h2c one is open")
	}
	c.CloseIdleConnections()
	waitFor(t, "the slot of the closed h2c connection", func() bool { return !refused(t, h.addr) })
}

// getOK GETs url and reads the body to its end (so the connection stays
// open for the next request).
func getOK(c *http.Client, url string) error {
	res, err := c.Get(url)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if _, err := io.ReadAll(res.Body); err != nil {
		return err
	}
	if res.StatusCode != 200 {
		return fmt.Errorf("status %d", res.StatusCode)
	}
	return nil
}

func h2cOnly() *http.Protocols {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	return p
}

// The net/http path (HTTP/2 here) has the same response-header limit as
// the fast path, through the one pipeline.
func TestResponseHeaderTimeoutOnHTTP2(t *testing.T) {
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	up := serveLoopback(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}), Protocols: h2cOnly()})
	h := start(t, func(c *config.Config, _ *Options) { c.ResponseHeaderTimeout = 200 * time.Millisecond })
	h.to(up)
	res, err := h.client(true).Get("http://" + up + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusGatewayTimeout || res.Header.Get(httpproxy.ErrorHeader) != httpproxy.ReasonTimeout {
		t.Fatalf("h2 request to a silent upstream: %d %q, want 504 %s", res.StatusCode, res.Header.Get(httpproxy.ErrorHeader), httpproxy.ReasonTimeout)
	}
	if n := h.metric(t, "limit_exceeded_total", map[string]string{"direction": "outbound", "limit": metrics.LimitResponseHeaders}); n != 1 {
		t.Errorf("limit_exceeded_total{limit=response-headers} = %v, want 1", n)
	}
}

// The response-header timeout ends when headers arrive: a body that takes
// longer is not cut (net/http path, HTTP/2 here).
func TestResponseHeaderTimeoutDoesNotCutTheBody(t *testing.T) {
	up := serveLoopback(t, &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		// Sleep: the body is slower than the header timeout on purpose.
		time.Sleep(500 * time.Millisecond)
		io.WriteString(w, "late body")
	}), Protocols: h2cOnly()})
	h := start(t, func(c *config.Config, _ *Options) { c.ResponseHeaderTimeout = 200 * time.Millisecond })
	h.to(up)
	res, err := h.client(true).Get("http://" + up + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if b, err := io.ReadAll(res.Body); err != nil || string(b) != "late body" {
		t.Errorf("body %q (%v), want it whole", b, err)
	}
}
