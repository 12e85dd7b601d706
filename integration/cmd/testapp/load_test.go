package main

import (
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
)

// -new-conn opens a connection for every request; without it requests
// share the keep-alive pool. Flags that do not go together are refused.
func TestLoadNewConn(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	for _, tc := range []struct {
		args  []string
		conns int64
	}{
		{[]string{"-n", "5", srv.URL}, 1},
		{[]string{"-n", "5", "-new-conn", srv.URL}, 5},
	} {
		conns.Store(0)
		c, err := parseLoad(tc.args)
		if err != nil {
			t.Fatal(err)
		}
		send, _, closeFn, err := c.sender("run")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 5 {
			if x := send(0, i); x.Status != "200" {
				t.Fatalf("%v: request %d: %+v", tc.args, i, x)
			}
		}
		closeFn()
		if got := conns.Load(); got != tc.conns {
			t.Errorf("%v: %d connections for 5 requests, want %d", tc.args, got, tc.conns)
		}
	}
	if _, err := parseLoad([]string{"-grpc", "-new-conn", "host:1"}); err == nil {
		t.Error("-grpc -new-conn accepted")
	}
}
