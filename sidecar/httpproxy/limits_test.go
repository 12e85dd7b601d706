package httpproxy

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// The limits of the fast path, each with the metric that counts it.

// closedAt runs script on each upstream connection and reports on the
// returned channel when the proxy closed that connection (a read of the
// upstream side returns an error).
func closedAt(t *testing.T, script func(c net.Conn, r *bufio.Reader)) (*scripted, chan time.Time) {
	t.Helper()
	closed := make(chan time.Time, 4)
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		script(c, r)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.Copy(io.Discard, r)
		closed <- time.Now()
	})
	return up, closed
}

func within(t *testing.T, ch chan time.Time, d time.Duration, what string) time.Time {
	t.Helper()
	select {
	case at := <-ch:
		return at
	case <-time.After(d):
		t.Fatalf("%s: nothing within %s", what, d)
	}
	return time.Time{}
}

func TestRequestBodyThatStallsIsAnswered408(t *testing.T) {
	up, closed := closedAt(t, func(c net.Conn, r *bufio.Reader) {
		http.ReadRequest(r) // the head; the body is read by closedAt
	})
	f := startFast(t, up.addr, func(o *Options) { o.BodyIdleTimeout = 200 * time.Millisecond })
	c, r := f.dial(t)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: svc\r\nContent-Length: 1000000000\r\n\r\n")
	c.Write(make([]byte, 64<<10)) // a body that starts, then stops
	res, err := http.ReadResponse(r, nil)
	if err != nil || res.StatusCode != http.StatusRequestTimeout || !res.Close || res.Header.Get(ErrorHeader) != ReasonRequestTimeout {
		t.Fatalf("stalled body: %v %v, want 408 %s with Connection: close", res, err, ReasonRequestTimeout)
	}
	within(t, closed, 2*time.Second, "upstream connection closed")
	if n := counter(t, f.reg, "limit_exceeded_total", "limit", metrics.LimitRequestBodyIdle); n != 1 {
		t.Errorf("limit_exceeded_total{limit=%q} = %v, want 1", metrics.LimitRequestBodyIdle, n)
	}
}

func TestResponseHeadersThatNeverComeAreAnswered504(t *testing.T) {
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		req, err := readRequest(r)
		if err != nil {
			return
		}
		if req.Header.Get("Content-Type") == "application/grpc" {
			// gRPC has its own deadline: slower than the limit, still answered.
			// Sleep: the upstream is slow on purpose (past the 200ms limit).
			time.Sleep(400 * time.Millisecond)
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		}
		r.ReadByte() // hold the connection
	})
	f := startFast(t, up.addr, func(o *Options) { o.ResponseHeaderTimeout = 200 * time.Millisecond })
	c, r := f.dial(t)
	start := time.Now()
	res, _ := get(t, c, r, "GET", "")
	if res.StatusCode != http.StatusGatewayTimeout || res.Header.Get(ErrorHeader) != ReasonTimeout {
		t.Fatalf("silent upstream: %d %q, want 504 %s", res.StatusCode, res.Header.Get(ErrorHeader), ReasonTimeout)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("answered after %s, before the 200ms limit", d)
	}
	if n := counter(t, f.reg, "limit_exceeded_total", "limit", metrics.LimitResponseHeaders); n != 1 {
		t.Errorf("limit_exceeded_total{limit=%q} = %v, want 1", metrics.LimitResponseHeaders, n)
	}
	c2, r2 := f.dial(t)
	if res, _ := get(t, c2, r2, "POST", "Content-Type: application/grpc\r\nContent-Length: 0\r\n"); res.StatusCode != 200 {
		t.Errorf("gRPC request slower than the limit: %d, want 200 (not limited)", res.StatusCode)
	}
}

func TestClientThatLeavesCancelsTheUpstreamRequest(t *testing.T) {
	up, closed := closedAt(t, func(c net.Conn, r *bufio.Reader) {
		http.ReadRequest(r) // and never answer
	})
	f := startFast(t, up.addr)
	c, _ := f.dial(t)
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: svc\r\n\r\n")
	// Sleep: the request waits upstream past watchAfter, so the client watch polls; no hook marks that.
	time.Sleep(150 * time.Millisecond)
	left := time.Now()
	c.Close()
	at := within(t, closed, 2*time.Second, "upstream connection closed after the client left")
	if d := at.Sub(left); d > 100*time.Millisecond {
		t.Errorf("upstream request cancelled %s after the client left, want within 100ms", d)
	}
	waitFor(t, "response_total{error=client-canceled}", func() bool {
		return counter(t, f.reg, "response_total", "error", ReasonClientGone) == 1
	})
}

func TestClientThatStopsReadingIsCut(t *testing.T) {
	wrote := make(chan error, 1)
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		if _, err := readRequest(r); err != nil {
			return
		}
		io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1073741824\r\n\r\n")
		c.SetWriteDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(c, io.LimitReader(zeros{}, 1<<30))
		wrote <- err
	})
	f := startFast(t, up.addr, func(o *Options) { o.WriteTimeout = 200 * time.Millisecond })
	c, _ := f.dial(t)
	io.WriteString(c, "GET /big HTTP/1.1\r\nHost: svc\r\n\r\n") // and read nothing
	select {
	case err := <-wrote:
		if err == nil || strings.Contains(err.Error(), "timeout") {
			t.Fatalf("upstream write ended with %v, want the proxy to have closed its connection", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a client that reads nothing still holds the upstream connection after 5s")
	}
	waitFor(t, "limit_exceeded_total{limit=write-stall}", func() bool {
		return counter(t, f.reg, "limit_exceeded_total", "limit", metrics.LimitWriteStall) == 1
	})
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestInterimResponsesAreCapped(t *testing.T) {
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		for {
			req, err := readRequest(r)
			if err != nil {
				return
			}
			n := 2
			if req.URL.Path == "/many" {
				n = 3
			}
			io.WriteString(c, strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </s>\r\n\r\n", n)+"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	f := startFast(t, up.addr, func(o *Options) { o.MaxInformational = 2 })
	for _, tc := range []struct {
		path   string
		status int
	}{{"/two", 200}, {"/many", 502}} {
		c, r := f.dial(t)
		io.WriteString(c, "GET "+tc.path+" HTTP/1.1\r\nHost: svc\r\n\r\n")
		interim := 0
		for {
			res, err := http.ReadResponse(r, nil)
			if err != nil {
				t.Fatalf("%s: %v", tc.path, err)
			}
			if res.StatusCode == 103 {
				interim++
				continue
			}
			if res.StatusCode != tc.status || interim != 2 {
				t.Errorf("%s: %d after %d interim responses, want %d after 2", tc.path, res.StatusCode, interim, tc.status)
			}
			break
		}
	}
	if n := counter(t, f.reg, "limit_exceeded_total", "limit", metrics.LimitInformational); n != 1 {
		t.Errorf("limit_exceeded_total{limit=%q} = %v, want 1", metrics.LimitInformational, n)
	}
}

// eventually retries check until it passes or 5s pass.
func waitFor(t *testing.T, what string, check func() bool) {
	t.Helper()
	eventually.Within(t, 5*time.Second, what, check)
}

// A request that timed out waiting for response headers is not sent
// again (the retry rule is for connections that died, not slow ones).
func TestTimedOutRequestIsNotSentAgain(t *testing.T) {
	var slow atomic.Int32
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		for {
			req, err := readRequest(r)
			if err != nil {
				return
			}
			if req.URL.Path == "/slow" {
				slow.Add(1)
				r.ReadByte() // never answer
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	f := startFast(t, up.addr, func(o *Options) { o.ResponseHeaderTimeout = 200 * time.Millisecond })
	c, r := f.dial(t)
	get(t, c, r, "GET", "") // the connection is now pooled, so /slow reuses it
	io.WriteString(c, "GET /slow HTTP/1.1\r\nHost: svc\r\n\r\n")
	if res, err := http.ReadResponse(r, nil); err != nil || res.StatusCode != http.StatusGatewayTimeout {
		t.Fatalf("slow upstream: %v %v, want 504", res, err)
	}
	// Sleep: a retry would have arrived by now; nothing marks its absence.
	time.Sleep(300 * time.Millisecond)
	if n := slow.Load(); n != 1 {
		t.Errorf("the upstream got the timed-out request %d times, want 1", n)
	}
}
