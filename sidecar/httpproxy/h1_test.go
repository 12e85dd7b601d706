package httpproxy

import (
	"bufio"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/plexus-mesh/plexus/sidecar/metrics"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// scripted is an upstream whose every connection runs script.
type scripted struct {
	addr    netip.AddrPort
	accepts atomic.Int32
	closes  atomic.Int32 // connections the script ended
}

func upstreamServer(t *testing.T, script func(c net.Conn, r *bufio.Reader)) *scripted {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &scripted{addr: ln.Addr().(*net.TCPAddr).AddrPort()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepts.Add(1)
			go func() {
				script(c, bufio.NewReader(c))
				c.Close()
				s.closes.Add(1)
			}()
		}
	}()
	return s
}

// readRequest reads one request head and its Content-Length body.
func readRequest(r *bufio.Reader) (*http.Request, error) {
	req, err := http.ReadRequest(r)
	if err != nil {
		return nil, err
	}
	_, err = io.Copy(io.Discard, req.Body)
	return req, err
}

type fast struct {
	p      *Proxy
	reg    *prometheus.Registry
	addr   string
	handed chan net.Conn
}

// startFast serves the fast path on a loopback listener, forwarding to
// dst, with options changed by mut.
func startFast(t *testing.T, dst netip.AddrPort, mut ...func(*Options)) *fast {
	t.Helper()
	f := &fast{reg: prometheus.NewRegistry(), handed: make(chan net.Conn, 1)}
	opts := Options{
		Direction: metrics.Outbound, Metrics: metrics.New(f.reg, 100),
		Log:            testLog(),
		ConnectTimeout: time.Second, IdleConnTimeout: time.Minute, MaxIdleConnsPerHost: 4,
		ReadHeaderTimeout: time.Second, ClientIdleTimeout: time.Minute, MaxInformational: 5,
	}
	for _, m := range mut {
		m(&opts)
	}
	f.p = New(opts)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.addr = ln.Addr().String()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				raw, _ := c.(*net.TCPConn).SyscallConn()
				if h := f.p.ServeHTTP1(ClientConn{Conn: c, Raw: raw, Dst: dst}); h != nil {
					f.handed <- h
				}
			}()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		f.p.Shutdown(ctx)
		f.p.CloseIdle()
	})
	return f
}

// pooled counts f's idle upstream connections, and those of them on which
// something waits: for these tests, the FIN of a server that closed it.
// (Looking reads what waits, as the pool's own check before reuse does.)
func (f *fast) pooled() (idle, closed int) {
	p := &f.p.h1pool
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, list := range p.idle {
		for _, u := range list {
			idle++
			if !u.clean() {
				closed++
			}
		}
	}
	return idle, closed
}

// waitPooledClosed waits until f's pool holds n idle connections, each
// closed by its server and the close seen by the proxy's socket.
func (f *fast) waitPooledClosed(t *testing.T, n int) {
	t.Helper()
	eventually.Within(t, 2*time.Second, "the server's close of the pooled connections", func() bool {
		idle, closed := f.pooled()
		return idle == n && closed == n
	})
}

func (f *fast) dial(t *testing.T) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.Dial("tcp", f.addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(5 * time.Second))
	return c, bufio.NewReader(c)
}

// get sends a GET and returns the response with its body read.
func get(t *testing.T, c net.Conn, r *bufio.Reader, method, extra string) (*http.Response, string) {
	t.Helper()
	if _, err := io.WriteString(c, method+" / HTTP/1.1\r\nHost: svc\r\n"+extra+"\r\n"); err != nil {
		t.Fatal(err)
	}
	res, err := http.ReadResponse(r, &http.Request{Method: method})
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return res, string(b)
}

// Chunk data and trailers are relayed as received, under size lines the
// proxy writes itself (extensions dropped).
func TestFastPathRelaysChunkedBodies(t *testing.T) {
	const reqBody = "5;ext=1\r\nhello\r\n0\r\nX-Sum: 5\r\n\r\n"
	wantUp := "POST /up HTTP/1.1\r\nHost: svc\r\nTrailer: X-Sum\r\nTe: trailers\r\nTransfer-Encoding: chunked\r\n\r\n" +
		"5\r\nhello\r\n0\r\nX-Sum: 5\r\n\r\n"
	got := make(chan string, 1)
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		b := make([]byte, len(wantUp))
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		io.ReadFull(r, b)
		got <- string(b)
		// The response in pieces, so the proxy reads it across fills.
		for _, part := range []string{
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Done\r\n\r\n3\r\nab",
			"c\r\n", "A\r\n0123456789\r\n0\r\nX-Done: yes\r\n", "\r\n",
		} {
			io.WriteString(c, part)
			// Sleep: the pieces must reach the proxy in separate reads; nothing tells when it has read one.
			time.Sleep(20 * time.Millisecond)
		}
		r.ReadByte() // hold the connection until the proxy closes it
	})
	f := startFast(t, up.addr)
	c, r := f.dial(t)
	io.WriteString(c, "POST /up HTTP/1.1\r\nHost: svc\r\nConnection: keep-alive\r\nTe: trailers\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\n\r\n"+reqBody)
	if s := <-got; s != wantUp {
		t.Errorf("upstream got\n%q\nwant\n%q", s, wantUp)
	}
	want := "HTTP/1.1 200 OK\r\nTrailer: X-Done\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\na\r\n0123456789\r\n0\r\nX-Done: yes\r\n\r\n"
	b := make([]byte, len(want))
	if _, err := io.ReadFull(r, b); err != nil || string(b) != want {
		t.Errorf("client got %q (%v)\nwant %q", b, err, want)
	}
}

func TestFastPathPipelinedRequestsShareOneUpstream(t *testing.T) {
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		for {
			req, err := readRequest(r)
			if err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: "+strconv.Itoa(len(req.URL.Path))+"\r\n\r\n"+req.URL.Path)
		}
	})
	f := startFast(t, up.addr)
	c, r := f.dial(t)
	io.WriteString(c, "GET /one HTTP/1.1\r\nHost: svc\r\n\r\nPOST /two HTTP/1.1\r\nHost: svc\r\nContent-Length: 3\r\n\r\nxyzGET /three HTTP/1.1\r\nHost: svc\r\n\r\n")
	for _, want := range []string{"/one", "/two", "/three"} {
		res, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		if string(b) != want {
			t.Errorf("body %q, want %q", b, want)
		}
	}
	if n := up.accepts.Load(); n != 1 {
		t.Errorf("%d upstream connections, want 1", n)
	}
	if n := counter(t, f.reg, "request_total"); n != 3 {
		t.Errorf("request_total = %v, want 3", n)
	}
}

func TestFastPathReplacesPooledConnectionsTheServerClosed(t *testing.T) {
	// The server answers one request per connection and closes it without
	// saying so, as after a keep-alive timeout.
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		if _, err := readRequest(r); err == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	f := startFast(t, up.addr)
	c, r := f.dial(t)
	get(t, c, r, "GET", "")
	f.waitPooledClosed(t, 1)
	if res, body := get(t, c, r, "GET", ""); res.StatusCode != 200 || body != "ok" {
		t.Errorf("GET on a closed pooled connection: %d %q, want it probed and skipped", res.StatusCode, body)
	}
	f.waitPooledClosed(t, 1)
	if res, body := get(t, c, r, "POST", "Content-Length: 0\r\n"); res.StatusCode != 200 || body != "ok" {
		t.Errorf("POST on a closed pooled connection: %d %q, want it probed and skipped", res.StatusCode, body)
	}
	if n := up.accepts.Load(); n != 3 {
		t.Errorf("%d upstream connections, want 3", n)
	}
}

func TestFastPathHandsOffWithEveryByte(t *testing.T) {
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		for {
			if _, err := readRequest(r); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
		}
	})
	for _, odd := range []string{
		"POST / HTTP/1.1\r\nHost: svc\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\nhello",
		"GET /ws HTTP/1.1\r\nHost: svc\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n",
		"GET / HTTP/1.0\r\n\r\n",
		"GET / HTTP/1.1\r\nHost: svc\r\nX-Big: " + strings.Repeat("b", h1ReadBuf) + "\r\n\r\n",
	} {
		f := startFast(t, up.addr)
		c, r := f.dial(t)
		get(t, c, r, "GET", "") // served by the fast path first
		io.WriteString(c, odd+"GET /after HTTP/1.1\r\nHost: svc\r\n\r\n")
		want := odd + "GET /after HTTP/1.1\r\nHost: svc\r\n\r\n"
		select {
		case hc := <-f.handed:
			hc.SetReadDeadline(time.Now().Add(2 * time.Second))
			b := make([]byte, len(want))
			if _, err := io.ReadFull(hc, b); err != nil || string(b) != want {
				t.Errorf("handed-off connection replays %.60q… (%v), want %.60q…", b, err, want)
			}
			hc.Close()
		case <-time.After(2 * time.Second):
			t.Errorf("%.40q… was not handed off", odd)
		}
	}
}

func TestFastPathResponsesWithoutLengthOrBody(t *testing.T) {
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		req, err := readRequest(r)
		if err != nil {
			return
		}
		switch req.URL.Path {
		case "/hints":
			io.WriteString(c, "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nk")
		case "/head":
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
		default: // until close
			io.WriteString(c, "HTTP/1.1 200 OK\r\n\r\nuntil the end")
			return
		}
		r.ReadByte()
	})
	f := startFast(t, up.addr)

	c, r := f.dial(t)
	io.WriteString(c, "GET /hints HTTP/1.1\r\nHost: svc\r\n\r\n")
	hints := ""
	for !strings.HasSuffix(hints, "\r\n\r\n") {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		hints += line
	}
	if hints != "HTTP/1.1 103 Early Hints\r\nLink: </s.css>\r\n\r\n" {
		t.Errorf("interim response %q, want the 103 relayed", hints)
	}
	res, err := http.ReadResponse(r, nil)
	if err != nil || res.StatusCode != 200 {
		t.Fatalf("after the 103: %v %v", res, err)
	}
	res.Body.Close()

	c, r = f.dial(t)
	io.WriteString(c, "HEAD /head HTTP/1.1\r\nHost: svc\r\n\r\n")
	if res, err := http.ReadResponse(r, &http.Request{Method: "HEAD"}); err != nil || res.ContentLength != 1000 {
		t.Fatalf("HEAD: %v %v", res, err)
	}
	if res, body := get(t, c, r, "GET", ""); body != "until the end" || !res.Close {
		t.Errorf("close-delimited body %q, Connection: close %v", body, res.Close)
	}
	if _, err := r.ReadByte(); err != io.EOF {
		t.Errorf("after a close-delimited response the client connection is open (%v)", err)
	}
}

func TestFastPathMalformedResponseIs502(t *testing.T) {
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		readRequest(r)
		io.WriteString(c, "SPEAKING NONSENSE\r\n\r\n")
	})
	f := startFast(t, up.addr)
	c, r := f.dial(t)
	res, _ := get(t, c, r, "GET", "")
	if res.StatusCode != 502 || res.Header.Get(ErrorHeader) != ReasonUpstreamReset {
		t.Errorf("got %d %q, want 502 %s", res.StatusCode, res.Header.Get(ErrorHeader), ReasonUpstreamReset)
	}
	// Counted once the answer is written, so possibly after the client read it.
	eventually.Within(t, 2*time.Second, "response_total = 1", func() bool {
		return counter(t, f.reg, "response_total") == 1
	})
}

func TestFastPathShutdownClosesIdleAndFinishesBusy(t *testing.T) {
	// /slow is answered once the test releases it, after Shutdown began.
	slowArrived, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	releaseSlow := func() { releaseOnce.Do(func() { close(release) }) }
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		for {
			req, err := readRequest(r)
			if err != nil {
				return
			}
			if req.URL.Path == "/slow" {
				close(slowArrived)
				<-release
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
		}
	})
	f := startFast(t, up.addr)
	t.Cleanup(releaseSlow) // before f's Shutdown, should the test end early
	idle, idleR := f.dial(t)
	get(t, idle, idleR, "GET", "")
	busy, busyR := f.dial(t)
	io.WriteString(busy, "GET /slow HTTP/1.1\r\nHost: svc\r\n\r\n")
	select {
	case <-slowArrived: // the request is in flight
	case <-time.After(2 * time.Second):
		t.Fatal("/slow did not reach the upstream")
	}

	done := make(chan struct{})
	go func() {
		defer close(done)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		f.p.Shutdown(ctx)
	}()
	if _, err := idleR.ReadByte(); err != io.EOF {
		t.Errorf("idle connection: %v, want EOF", err)
	}
	select {
	case <-done:
		t.Fatal("Shutdown returned while a request was in flight")
	default:
	}
	releaseSlow() // Shutdown is under way: it closed the idle connection
	res, err := http.ReadResponse(busyR, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	if string(b) != "ok" || !res.Close {
		t.Errorf("in-flight response %q, Connection: close %v; want it finished and closing", b, res.Close)
	}
	select {
	case <-done:
	case <-time.After(2 * time.Second):
		t.Error("Shutdown did not return after the last response")
	}
}

// counter sums the samples of counter name whose labels include the
// name-value pairs in labels.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool {
					return l.GetName() == labels[i] && l.GetValue() == labels[i+1]
				}) {
					continue next
				}
			}
			n += m.GetCounter().GetValue()
		}
	}
	return n
}

func testLog() *slog.Logger {
	if os.Getenv("PLEXUS_TEST_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// TestFastPathRetryDialsPastOtherDeadConnections: a server restart closes
// every pooled connection; the retry of a GET must not take another dead
// one from the pool.
func TestFastPathRetryDialsPastOtherDeadConnections(t *testing.T) {
	var serve atomic.Bool // false: answer one request, then wait for the next and drop it
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		for {
			if _, err := readRequest(r); err != nil {
				return
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
			if !serve.Load() {
				r.ReadByte() // the next request arrives, then the connection dies
				return
			}
		}
	})
	f := startFast(t, up.addr)
	// Three idle pooled connections, from three concurrent clients.
	var conns [3]net.Conn
	var readers [3]*bufio.Reader
	for i := range conns {
		conns[i], readers[i] = f.dial(t)
		io.WriteString(conns[i], "GET / HTTP/1.1\r\nHost: svc\r\n\r\n")
	}
	for i := range conns {
		res, err := http.ReadResponse(readers[i], nil)
		if err != nil || res.StatusCode != 200 {
			t.Fatalf("warm-up %d: %v %v", i, res, err)
		}
		io.ReadAll(res.Body)
	}
	// A warm-up request may have found another's connection in the pool
	// (the server dropped it, the proxy retried), so "all" is every
	// connection the server still holds.
	eventually.Within(t, 2*time.Second, "every open upstream connection back in the pool", func() bool {
		idle, _ := f.pooled()
		return idle > 0 && idle == int(up.accepts.Load()-up.closes.Load())
	})
	serve.Store(true) // the "restarted" server answers new connections
	res, body := get(t, conns[0], readers[0], "GET", "")
	if res.StatusCode != 200 || body != "ok" {
		t.Errorf("GET after the pool died: %d %q (%s), want 200 on a new connection", res.StatusCode, body, res.Header.Get(ErrorHeader))
	}
}

// The request's method decides the response's framing even when a
// streamed request body reused the buffer its head was read into (here a
// trailer "HEAD: x" lands where the method was).
func TestMethodSurvivesAStreamedRequestBody(t *testing.T) {
	headUp := make(chan struct{})
	up := upstreamServer(t, func(c net.Conn, r *bufio.Reader) {
		req, err := http.ReadRequest(r)
		if err != nil {
			return
		}
		close(headUp)
		if _, err := io.Copy(io.Discard, req.Body); err == nil {
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n"+strings.Repeat("b", 20))
		}
		r.ReadByte()
	})
	f := startFast(t, up.addr)
	c, r := f.dial(t)
	io.WriteString(c, "POST / HTTP/1.1\r\nHost: svc\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n")
	// The proxy has read the head (it streamed it upstream) and waits for
	// the trailers, which come in a read of their own.
	select {
	case <-headUp:
	case <-time.After(2 * time.Second):
		t.Fatal("the request head did not reach the upstream")
	}
	io.WriteString(c, "HEAD: x\r\n\r\n")
	res, err := http.ReadResponse(r, &http.Request{Method: "POST"})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(res.Body); err != nil || len(b) != 20 {
		t.Errorf("body %q (%v), want the 20 bytes the upstream sent", b, err)
	}
}
