package h2transport

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/textproto"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/plexus-mesh/plexus/testsupport/tcptest"
)

// h2cServer serves h on loopback with net/http's HTTP/2 server (prior
// knowledge), the reference these tests hold the client against.
func h2cServer(t testing.TB, h http.Handler, configure func(*http.Server)) (addr string, srv *http.Server) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv = &http.Server{Handler: h, Protocols: new(http.Protocols)}
	srv.Protocols.SetUnencryptedHTTP2(true)
	if configure != nil {
		configure(srv)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String(), srv
}

func newTransport() *Transport {
	d := &net.Dialer{}
	return &Transport{Dial: d.DialContext, IdleConnTimeout: time.Minute}
}

func do(t *testing.T, tr *Transport, req *http.Request) (*http.Response, []byte) {
	t.Helper()
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the body: %v", req.Method, req.URL, err)
	}
	return res, b
}

func TestRequestAndResponse(t *testing.T) {
	addr, _ := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.ProtoMajor != 2 {
			t.Errorf("request came as %s", r.Proto)
		}
		body, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Method", r.Method)
		w.Header().Set("X-Host", r.Host)
		w.Header().Set("X-Path", r.URL.RequestURI())
		w.Header().Set("X-Header", strings.Join(r.Header.Values("X-Multi"), "|"))
		w.Header().Set("X-UA", r.Header.Get("User-Agent"))
		w.Header().Set("X-Te", r.Header.Get("Te"))
		w.Header().Set("X-Length", fmt.Sprint(r.ContentLength))
		w.Header().Set("Trailer", "X-Sum")
		w.Write(body)
		w.Header().Set("X-Sum", fmt.Sprint(len(body)))
		w.Header().Set(http.TrailerPrefix+"X-Late", "undeclared")
	}), nil)
	tr := newTransport()
	defer tr.CloseIdleConnections()

	req, _ := http.NewRequest("POST", "http://"+addr+"/a/b?c=d%20e", strings.NewReader("hello"))
	req.Host = "svc.example:8080"
	req.Header.Add("X-Multi", "1")
	req.Header.Add("X-Multi", "2")
	req.Header.Set("Connection", "keep-alive")
	req.Header.Set("Te", "trailers")
	res, body := do(t, tr, req)
	want := map[string]string{
		"X-Method": "POST", "X-Host": "svc.example:8080", "X-Path": "/a/b?c=d%20e",
		"X-Header": "1|2", "X-UA": "", "X-Te": "trailers", "X-Length": "5",
	}
	for k, v := range want {
		if got := res.Header.Get(k); got != v {
			t.Errorf("%s = %q, want %q", k, got, v)
		}
	}
	if string(body) != "hello" || res.StatusCode != 200 || res.Proto != "HTTP/2.0" {
		t.Errorf("got %d %s %q", res.StatusCode, res.Proto, body)
	}
	if res.Trailer.Get("X-Sum") != "5" || res.Trailer.Get("X-Late") != "undeclared" {
		t.Errorf("trailers %v, want X-Sum 5 and X-Late", res.Trailer)
	}
	if _, ok := res.Header["Trailer"]; ok {
		t.Error("the Trailer announcement stayed in the headers")
	}
}

// Bodies larger than every window, both ways at once, arrive whole.
func TestLargeBodiesBothWays(t *testing.T) {
	addr, _ := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(w, r.Body) // echo as it arrives (full duplex)
	}), nil)
	tr := newTransport()
	defer tr.CloseIdleConnections()
	payload := make([]byte, 9<<20+123)
	rand.Read(payload)
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("PUT", "http://"+addr+"/", io.NopCloser(bytes.NewReader(payload)))
			req.ContentLength = -1
			_, body := do(t, tr, req)
			if !bytes.Equal(body, payload) {
				t.Errorf("echoed %d bytes, want the %d sent", len(body), len(payload))
			}
		}()
	}
	wg.Wait()
}

// Many requests at once share connections within the server's stream
// limit (its SETTINGS are awaited before the first stream), and none
// fails.
func TestConcurrentStreamsWithinServerLimit(t *testing.T) {
	addr, _ := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, r.URL.Path)
	}), func(s *http.Server) { s.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 3} })
	tr := newTransport()
	defer tr.CloseIdleConnections()
	var wg sync.WaitGroup
	for i := range 200 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req, _ := http.NewRequest("GET", fmt.Sprintf("http://%s/%d", addr, i), nil)
			_, body := do(t, tr, req)
			if string(body) != fmt.Sprintf("/%d", i) {
				t.Errorf("request %d got %q", i, body)
			}
		}()
	}
	wg.Wait()
}

func TestHeadAndEmptyResponses(t *testing.T) {
	addr, _ := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/len":
			w.Header().Set("Content-Length", "10")
			if r.Method != http.MethodHead {
				io.WriteString(w, "0123456789")
			}
		case "/none":
			w.WriteHeader(http.StatusNoContent)
		}
	}), nil)
	tr := newTransport()
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest("HEAD", "http://"+addr+"/len", nil)
	res, body := do(t, tr, req)
	if res.ContentLength != 10 || len(body) != 0 {
		t.Errorf("HEAD: length %d, body %q; want 10 and nothing", res.ContentLength, body)
	}
	req, _ = http.NewRequest("GET", "http://"+addr+"/len", nil)
	if res, body = do(t, tr, req); res.ContentLength != 10 || string(body) != "0123456789" {
		t.Errorf("GET: length %d, body %q", res.ContentLength, body)
	}
	req, _ = http.NewRequest("GET", "http://"+addr+"/none", nil)
	if res, body = do(t, tr, req); res.StatusCode != 204 || res.ContentLength != 0 || len(body) != 0 {
		t.Errorf("204: %d length %d body %q", res.StatusCode, res.ContentLength, body)
	}
}

func TestInterimResponses(t *testing.T) {
	addr, _ := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</a.css>; rel=preload")
		w.WriteHeader(http.StatusEarlyHints)
		w.WriteHeader(http.StatusEarlyHints)
		io.WriteString(w, "done")
	}), nil)
	tr := newTransport()
	defer tr.CloseIdleConnections()
	var seen []int
	var link string
	trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
		seen = append(seen, code)
		link = h.Get("Link")
		return nil
	}}
	req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), "GET", "http://"+addr+"/", nil)
	res, body := do(t, tr, req)
	if len(seen) != 2 || link == "" || res.StatusCode != 200 || string(body) != "done" {
		t.Errorf("interim %v (Link %q), final %d %q", seen, link, res.StatusCode, body)
	}

	// A hook's error fails the request.
	limit := errors.New("too many")
	trace.Got1xxResponse = func(int, textproto.MIMEHeader) error { return limit }
	if _, err := tr.RoundTrip(req); !errors.Is(err, limit) {
		t.Errorf("RoundTrip = %v, want the hook's error", err)
	}
}

// A canceled request resets its stream: the server's handler sees its
// context end, and the connection goes on serving others.
func TestCancelResetsTheStream(t *testing.T) {
	canceled := make(chan struct{})
	addr, _ := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/quick" {
			return
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(canceled)
	}), nil)
	tr := newTransport()
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/slow", nil)
	res, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(res.Body); !errors.Is(err, context.Canceled) {
		t.Errorf("body read after cancel: %v, want context.Canceled", err)
	}
	select {
	case <-canceled:
	case <-time.After(10 * time.Second):
		t.Fatal("the server's handler never saw the cancellation")
	}
	req, _ = http.NewRequest("GET", "http://"+addr+"/quick", nil)
	do(t, tr, req)
}

// Closing a response body early resets the stream and gives its window
// back, so the connection keeps carrying other streams.
func TestEarlyCloseGivesTheWindowBack(t *testing.T) {
	big := make([]byte, 1<<20)
	addr, _ := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write(big)
	}), nil)
	tr := newTransport()
	defer tr.CloseIdleConnections()
	for range 40 { // 40 x 256 KiB unread would exhaust a 4 MiB connection window
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Read(make([]byte, 1)) // the body is arriving: close with some of it unread
		res.Body.Close()
	}
	req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
	if _, body := do(t, tr, req); len(body) != len(big) {
		t.Errorf("got %d bytes, want %d", len(body), len(big))
	}
}

// A server shutting down (GOAWAY) finishes the streams it took; requests
// sent after its GOAWAY go to a new connection.
func TestGoAwayLosesNothing(t *testing.T) {
	release := make(chan struct{})
	var srvs []*http.Server
	var mu sync.Mutex
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	waitIn := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/wait" {
			close(waitIn)
			<-release
		}
		io.WriteString(w, "ok")
	})
	// One server per connection, so that one can shut down while the
	// listener takes the next.
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			srv := &http.Server{Handler: h, Protocols: new(http.Protocols)}
			srv.Protocols.SetUnencryptedHTTP2(true)
			mu.Lock()
			srvs = append(srvs, srv)
			mu.Unlock()
			go srv.Serve(&oneConnListener{c: c, addr: ln.Addr()})
		}
	}()
	addr := ln.Addr().String()
	tr := newTransport()
	defer tr.CloseIdleConnections()

	waiting := make(chan error, 1)
	go func() {
		req, _ := http.NewRequest("GET", "http://"+addr+"/wait", nil)
		res, err := tr.RoundTrip(req)
		if err == nil {
			_, err = io.ReadAll(res.Body)
		}
		waiting <- err
	}()
	select {
	case <-waitIn: // the /wait stream is in the first connection's server
	case <-time.After(10 * time.Second):
		t.Fatal("the /wait request never reached the server")
	}
	mu.Lock()
	first := srvs[0]
	mu.Unlock()
	shut := make(chan struct{})
	go func() { first.Shutdown(context.Background()); close(shut) }()
	// The requests race the GOAWAY: sent before it, they are served or
	// refused and sent again; after it, they go to a new connection.
	// None may fail.
	for i := range 20 {
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		if _, body := do(t, tr, req); string(body) != "ok" {
			t.Fatalf("request %d after GOAWAY: %q", i, body)
		}
	}
	close(release)
	if err := <-waiting; err != nil {
		t.Errorf("the stream in flight at GOAWAY failed: %v", err)
	}
	<-shut
}

type oneConnListener struct {
	c    net.Conn
	addr net.Addr
	done chan struct{}
	once sync.Once
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	var c net.Conn
	l.once.Do(func() { c, l.c = l.c, nil; l.done = make(chan struct{}) })
	if c != nil {
		return c, nil
	}
	<-l.done
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error {
	l.once.Do(func() { l.done = make(chan struct{}) })
	select {
	case <-l.done:
	default:
		close(l.done)
	}
	return nil
}

func (l *oneConnListener) Addr() net.Addr { return l.addr }

// A status that is not three digits fails the request (net/http's
// client takes any number, and its server would panic relaying one over
// 999).
func TestMalformedStatus(t *testing.T) {
	for _, status := range []string{"2000", "20", "abc", "099"} {
		addr, stop := playServer(t, func(fr *http2.Framer, enc *hpack.Encoder, hb *bytes.Buffer) {
			enc.WriteField(hpack.HeaderField{Name: ":status", Value: status})
			fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: true, EndHeaders: true})
		})
		tr := newTransport()
		req, _ := http.NewRequest("GET", "http://"+addr+"/", nil)
		if res, err := tr.RoundTrip(req); err == nil {
			t.Errorf(":status %q: got a response %d, want an error", status, res.StatusCode)
		}
		stop()
	}
}

// Request trailers follow the body, announced in the headers.
func TestRequestTrailers(t *testing.T) {
	got := make(chan http.Header, 1)
	addr, _ := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		got <- r.Trailer
	}), nil)
	tr := newTransport()
	defer tr.CloseIdleConnections()
	pr, pw := io.Pipe()
	req, _ := http.NewRequest("POST", "http://"+addr+"/", pr)
	req.Trailer = http.Header{"Grpc-Status": nil}
	go func() {
		pw.Write([]byte("message"))
		req.Trailer.Set("Grpc-Status", "0")
		pw.Close()
	}()
	do(t, tr, req)
	if tl := <-got; tl.Get("Grpc-Status") != "0" {
		t.Errorf("the server got trailers %v, want Grpc-Status 0", tl)
	}
}

// A server whose settings allow no stream fails the request at once (one
// connection, not a dial loop), and its connection is not kept.
func TestServerTakingNoStreams(t *testing.T) {
	var dials atomic.Int32
	addr, _ := tcptest.Serve(t, "127.0.0.1:0", func(c net.Conn) {
		dials.Add(1)
		fr := http2.NewFramer(c, c)
		fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 0})
		io.Copy(io.Discard, c)
	})
	tr := newTransport()
	defer tr.CloseIdleConnections()
	for i := range 2 {
		req, _ := http.NewRequest("GET", "http://"+addr.String()+"/", nil)
		_, err := tr.RoundTrip(req)
		if err == nil || !strings.Contains(err.Error(), "takes no streams") {
			t.Errorf("RoundTrip = %v, want an error saying the server takes no streams", err)
		}
		if n := dials.Load(); n != int32(i+1) {
			t.Errorf("request %d: %d connections, want one each", i, n)
		}
	}
	tr.mu.Lock()
	left := len(tr.conns)
	tr.mu.Unlock()
	if left != 0 {
		t.Errorf("%d addresses still pooled, want none: the useless connections were kept", left)
	}
}

// Uploads cut short by the server (its handler returns without reading)
// give the connection's send window back: later uploads on the
// connection still go through.
func TestCutUploadsKeepTheSendWindow(t *testing.T) {
	addr, _ := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/echo" {
			io.Copy(w, r.Body)
		}
		// Anything else: answered without reading; the server resets the
		// stream while the client still sends.
	}), nil)
	tr := newTransport()
	defer tr.CloseIdleConnections()
	chunk := make([]byte, 256<<10)
	for range 40 { // 40 x 256 KiB: ten times the connection's initial send window
		req, _ := http.NewRequest("POST", "http://"+addr+"/cut", io.NopCloser(bytes.NewReader(chunk)))
		req.ContentLength = -1
		if res, err := tr.RoundTrip(req); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	big := make([]byte, 2<<20)
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+addr+"/echo", io.NopCloser(bytes.NewReader(big)))
	req.ContentLength = -1
	if _, body := do(t, tr, req); len(body) != len(big) {
		t.Errorf("echoed %d bytes, want %d", len(body), len(big))
	}
}

// Responses nobody reads hold their streams' windows only: the
// connection goes on carrying other streams.
func TestUnreadResponsesDoNotStallTheConnection(t *testing.T) {
	big := make([]byte, 1<<20)
	addr, _ := h2cServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/big" {
			w.Write(big)
		}
		io.WriteString(w, "ok")
	}), nil)
	tr := newTransport()
	defer tr.CloseIdleConnections()
	var unread []*http.Response
	for range 30 { // 30 x 256 KiB held: more than a 4 MiB connection window
		req, _ := http.NewRequest("GET", "http://"+addr+"/big", nil)
		res, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		unread = append(unread, res)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://"+addr+"/small", nil)
	if _, body := do(t, tr, req); string(body) != "ok" {
		t.Errorf("got %q", body)
	}
	for _, res := range unread {
		res.Body.Close()
	}
}
