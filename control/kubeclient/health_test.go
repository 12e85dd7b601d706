package kubeclient

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
	"github.com/plexus-mesh/plexus/testsupport/mctest"
)

// TestRemoteReady: a real API server is ready; one that accepts and
// never answers fails within the check's deadline; a refused one fails.
// Each check uses a new connection (a server that answers again passes at
// once).
func TestRemoteReady(t *testing.T) {
	s := apiservertest.Start(t)
	check, err := RemoteReady(mctest.Kubeconfig(s.URL, apiservertest.AdminToken), "test")
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := check(context.Background()); err != nil {
			t.Fatalf("a ready API server: %v", err)
		}
	}

	// A connection of its own each time, with the token.
	var conns atomic.Int32
	var auth atomic.Value
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth.Store(r.Header.Get("Authorization"))
	}))
	srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	defer srv.Close()
	if check, err = RemoteReady(mctest.Kubeconfig(srv.URL, "secret"), "test"); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := check(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := conns.Load(); n != 3 {
		t.Errorf("3 checks opened %d connections, want 3", n)
	}
	if a := auth.Load(); a != "Bearer secret" {
		t.Errorf("Authorization %q, want the kubeconfig's token", a)
	}

	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	check, err = RemoteReady(mctest.Kubeconfig("https://"+silent.Addr().String(), "token"), "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := check(ctx); err == nil {
		t.Error("a silent server passed")
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a silent server's check took %v, past its 300 ms deadline", d)
	}
	addr := silent.Addr().String()
	silent.Close()
	check, err = RemoteReady(mctest.Kubeconfig("https://"+addr, "token"), "test")
	if err != nil {
		t.Fatal(err)
	}
	if err := check(context.Background()); err == nil {
		t.Error("a refusing server passed")
	}
}
