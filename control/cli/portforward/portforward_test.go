package portforward_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	. "github.com/plexus-mesh/plexus/control/cli/portforward"
	"github.com/plexus-mesh/plexus/control/cli/portforward/portforwardtest"
)

func TestPodDialerRelaysBothWays(t *testing.T) {
	api := &portforwardtest.APIServer{Target: portforwardtest.EchoServer(t)}
	srv := api.Start(t)
	d := PodDialer{HTTP: srv.Client(), BaseURL: srv.URL}
	c, err := d.Dial(context.Background(), "plexus-viz", "web-1", 8084)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Messages below 126 bytes, below 64 KiB and above (in chunks).
	for _, n := range []int{5, 300, 100_000} {
		msg := bytes.Repeat([]byte("abcdefghij"), n/10)
		go func() { _, _ = c.Write(msg) }()
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		if !bytes.Equal(got, bytes.ToUpper(msg)) {
			t.Fatalf("%d bytes: echo differs", n)
		}
	}
	if got := api.Paths()[0]; got != "/api/v1/namespaces/plexus-viz/pods/web-1/portforward?ports=8084" {
		t.Errorf("asked %s", got)
	}
}

func TestPodDialerErrors(t *testing.T) {
	api := &portforwardtest.APIServer{Refuse: "error forwarding port 8084 to pod web-1: connection refused"}
	srv := api.Start(t)
	d := PodDialer{HTTP: srv.Client(), BaseURL: srv.URL}
	c, err := d.Dial(context.Background(), "plexus-viz", "web-1", 8084)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Read(make([]byte, 10))
	if err == nil || !strings.Contains(err.Error(), "plexus-viz/web-1:8084: error forwarding port 8084 to pod web-1: connection refused") {
		t.Errorf("read: %v", err)
	}
	// A refused upgrade (RBAC, say) names the status and the answer.
	d.BaseURL = srv.URL + "/elsewhere"
	_, err = d.Dial(context.Background(), "plexus-viz", "web-1", 8084)
	var ue *UpgradeError
	if !errors.As(err, &ue) || ue.Status != http.StatusForbidden || !strings.Contains(err.Error(), "403 Forbidden") {
		t.Errorf("refused upgrade: %v", err)
	}
}

// TestDialConn: a port-forward as a net.Conn, to the target of its pod
// and port; a read deadline that passes ends the blocked read.
func TestDialConn(t *testing.T) {
	api := &portforwardtest.APIServer{Target: "127.0.0.1:1", Targets: map[string]string{"shop/web-1:8080": portforwardtest.EchoServer(t)}}
	srv := api.Start(t)
	d := PodDialer{HTTP: srv.Client(), BaseURL: srv.URL}
	c, err := d.DialConn(context.Background(), "shop", "web-1", 8080)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got := c.RemoteAddr().String(); got != "shop/web-1:8080" {
		t.Errorf("RemoteAddr %q", got)
	}
	if _, err := c.Write([]byte("hello\n")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 6)
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "HELLO\n" {
		t.Fatalf("read %q, %v", got, err)
	}
	// A deadline set and cleared before it passes does nothing.
	_ = c.SetDeadline(time.Now().Add(20 * time.Millisecond))
	_ = c.SetDeadline(time.Time{})
	// Sleep: past the cleared deadline, to show its timer does not fire;
	// a timer that does not fire sends no event to wait for.
	time.Sleep(40 * time.Millisecond)
	if _, err := c.Write([]byte("again\n")); err != nil {
		t.Fatalf("write after a cleared deadline: %v", err)
	}
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "AGAIN\n" {
		t.Fatalf("read after a cleared deadline %q, %v", got, err)
	}
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	start := time.Now()
	if _, err := c.Read(got); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("read past its deadline: %v, want os.ErrDeadlineExceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the deadline ended the read after %v", took)
	}
	if err := c.Close(); err != nil {
		t.Errorf("Close after the deadline: %v", err)
	}
}
