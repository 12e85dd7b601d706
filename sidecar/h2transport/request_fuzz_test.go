package h2transport

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// The request side, differentially: the same request sent by this
// package's client and by net/http's HTTP/2 client to net/http's HTTP/2
// server must be accepted or refused alike, and arrive alike (method,
// target, authority, fields, body, trailers).

// view is what the server saw of a request.
type view struct {
	method, uri, host, header, body, trailer string
}

// (Request trailers are held by TestRequestTrailers: net/http's client
// can hang on a fuzzed trailer, which would stop the fuzzer.)
func FuzzRequestAgainstNetHTTP(f *testing.F) {
	f.Add("GET", "/", "X-A", "1", []byte(nil), false)
	f.Add("POST", "/p?q=1&r=%20", "Content-Type", "application/grpc", []byte("body"), true)
	f.Add("PUT", "/x", "X-Bad", "a\nb", []byte("b"), false)
	f.Add("GE T", "/", "X", "", []byte(nil), false)
	f.Add("DELETE", "/%zz", "Bad Name", "v", []byte(nil), false)
	f.Add("OPTIONS", "/", "Cookie", "a=1; b=2", []byte("xyz"), true)
	f.Add("PATCH", "/ü", "X-Ü", "ü", []byte{0}, true)

	var mu sync.Mutex
	var seen view
	srvAddr, _ := h2cServer(f, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		h := r.Header.Clone()
		mu.Lock()
		seen = view{method: r.Method, uri: r.RequestURI, host: r.Host, header: flat(h), body: string(body), trailer: flat(r.Trailer)}
		mu.Unlock()
	}), nil)
	ours := &Transport{Dial: (&net.Dialer{}).DialContext}
	ref := &http.Transport{Protocols: new(http.Protocols), DisableCompression: true}
	ref.Protocols.SetUnencryptedHTTP2(true)

	send := func(rt http.RoundTripper, method, target, name, value string, body []byte, stream bool) (view, bool) {
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequest(method, "http://"+srvAddr+target, rd)
		if err != nil {
			return view{}, false
		}
		req.Header.Set("User-Agent", "fuzz") // net/http adds its own when none is set
		req.Header[name] = []string{value}
		if stream && body != nil {
			req.ContentLength = -1 // a stream: no content-length, ended by END_STREAM
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		res, err := rt.RoundTrip(req.WithContext(ctx))
		if err != nil {
			return view{}, false
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		mu.Lock()
		defer mu.Unlock()
		return seen, true
	}
	f.Fuzz(func(t *testing.T, method, target, name, value string, body []byte, stream bool) {
		if _, err := http.NewRequest(method, "http://"+srvAddr+target, nil); err != nil {
			return
		}
		switch strings.ToLower(name) {
		case "connection", "proxy-connection", "keep-alive", "transfer-encoding", "upgrade", "te", "host", "content-length", "trailer", "user-agent":
			// Hop-by-hop and framing fields: the proxy removes them before
			// this client sees a request; net/http refuses some.
			return
		}
		want, wantOK := send(ref, method, target, name, value, body, stream)
		got, gotOK := send(ours, method, target, name, value, body, stream)
		if gotOK != wantOK || got != want {
			t.Errorf("%q %q %q: %q (stream %v):\nh2transport (sent %v): %+v\nnet/http    (sent %v): %+v", method, target, name, value, stream, gotOK, got, wantOK, want)
		}
	})
}
