package portforward_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

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
