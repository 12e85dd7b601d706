package httpproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"reflect"
	"syscall"
	"testing"
)

func TestRemoveHopByHop(t *testing.T) {
	h := http.Header{
		"Connection":        {"X-A, close", "x-b"},
		"X-A":               {"1"},
		"X-B":               {"2"},
		"Keep-Alive":        {"timeout=5"},
		"Proxy-Connection":  {"keep-alive"},
		"Te":                {"trailers"},
		"Trailer":           {"X-T"},
		"Transfer-Encoding": {"chunked"},
		"Upgrade":           {"websocket"},
		"X-Keep":            {"yes"},
		"Grpc-Timeout":      {"1S"},
	}
	removeHopByHop(h)
	want := http.Header{"X-Keep": {"yes"}, "Grpc-Timeout": {"1S"}}
	if !reflect.DeepEqual(h, want) {
		t.Errorf("got %v, want %v", h, want)
	}
}

func TestTEAndUpgrade(t *testing.T) {
	for v, want := range map[string]bool{"trailers": true, "gzip, Trailers": true, "trailers;q=1": true, "gzip": false, "": false} {
		if got := keepsTrailersTE(http.Header{"Te": {v}}); got != want {
			t.Errorf("TE %q: %v", v, got)
		}
	}
	if got := upgradeType(http.Header{"Connection": {"keep-alive, Upgrade"}, "Upgrade": {"websocket"}}); got != "websocket" {
		t.Errorf("upgrade = %q", got)
	}
	if got := upgradeType(http.Header{"Upgrade": {"websocket"}}); got != "" {
		t.Errorf("Upgrade without Connection: upgrade = %q", got)
	}
}

func TestOutgoing(t *testing.T) {
	r, _ := http.NewRequest("GET", "http://web.example/a%2Fb?q=1", nil)
	r.RequestURI = "/a%2Fb?q=1"
	r.Header.Set("Te", "trailers, deflate")
	r.Header.Set("Connection", "x-drop")
	r.Header.Set("X-Drop", "1")
	out := outgoing(r, netip.MustParseAddrPort("10.1.2.3:8080"), "")
	if out.URL.String() != "http://10.1.2.3:8080/a%2Fb?q=1" || out.Host != "web.example" || out.RequestURI != "" {
		t.Errorf("url %s host %s uri %q", out.URL, out.Host, out.RequestURI)
	}
	if out.Header.Get("Te") != "trailers" || out.Header.Get("X-Drop") != "" || r.Header.Get("X-Drop") != "1" {
		t.Errorf("headers %v (original %v)", out.Header, r.Header)
	}
}

func TestClassify(t *testing.T) {
	sys := func(e syscall.Errno) error { return &net.OpError{Op: "dial", Err: os.NewSyscallError("connect", e)} }
	cases := []struct {
		err    error
		status int
		reason string
	}{
		{&dialError{err: sys(syscall.ECONNREFUSED)}, 502, ReasonConnectRefused},
		{&dialError{err: sys(syscall.EHOSTUNREACH)}, 503, ReasonUnreachable},
		{&dialError{err: sys(syscall.ENETUNREACH)}, 503, ReasonUnreachable},
		{&dialError{err: context.DeadlineExceeded}, 504, ReasonConnectTimeout},
		{&dialError{err: errors.New("weird")}, 502, ReasonConnectError},
		{fmt.Errorf("wrapped: %w", &dialError{err: sys(syscall.ECONNREFUSED)}), 502, ReasonConnectRefused},
		{context.DeadlineExceeded, 504, ReasonTimeout},
		{errors.New("EOF"), 502, ReasonUpstreamReset},
		{context.Canceled, 499, ReasonClientGone},
		{fmt.Errorf("route: %w: unknown", ErrNoEndpoints), 503, ReasonNoEndpoints},
		{&dialError{err: &tlsError{errors.New("peer identity mismatch")}}, 502, ReasonTLS},
	}
	for _, c := range cases {
		if s, r := classify(c.err); s != c.status || r != c.reason {
			t.Errorf("classify(%v) = %d %s, want %d %s", c.err, s, r, c.status, c.reason)
		}
	}
	if grpcCode(504) != 4 || grpcCode(502) != 14 || grpcCode(503) != 14 {
		t.Error("grpc code mapping")
	}
}

func TestFailureAnswer(t *testing.T) {
	a := failure(&dialError{err: syscall.ECONNREFUSED}, false)
	if a.status != 502 || a.header.Get(ErrorHeader) != ReasonConnectRefused || a.body != "plexus-proxy: connect-refused\n" || a.grpcStatus != "" {
		t.Errorf("plain: %+v", a)
	}
	a = failure(&dialError{err: context.DeadlineExceeded}, true)
	if a.status != 200 || a.grpcStatus != "4" || a.header.Get("Grpc-Status") != "4" || a.header.Get("Content-Type") != "application/grpc" || a.body != "" {
		t.Errorf("gRPC: %+v", a)
	}
	// Nobody to answer: the metrics keep 499 even for gRPC.
	if a = failure(context.Canceled, true); a.status != 499 || a.reason != ReasonClientGone {
		t.Errorf("client gone: %+v", a)
	}
}
