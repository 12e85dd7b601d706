package mirrorcmd

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/mctest"
)

func TestParseFlags(t *testing.T) {
	t.Setenv("POD_NAMESPACE", "")
	c, err := ParseFlags(nil, io.Discard)
	if err != nil || c.Namespace != "plexus-multicluster" || c.AdminAddr != ":9996" {
		t.Errorf("defaults: %+v, %v", c, err)
	}
	if _, err := ParseFlags([]string{"--namespace", ""}, io.Discard); err == nil || !strings.Contains(err.Error(), "--namespace is required") {
		t.Errorf("empty --namespace: %v", err)
	}
}

// TestMainServesReadyOnceLinksSynced runs the command against a real
// kube-apiserver with the Link CRD: /ready answers 200 once the Links'
// cache has synced, and the command ends cleanly with its context.
func TestMainServesReadyOnceLinksSynced(t *testing.T) {
	s := apiservertest.Start(t)
	cfg := &rest.Config{Host: s.URL, BearerToken: apiservertest.AdminToken, TLSClientConfig: rest.TLSClientConfig{Insecure: true}} // loopback, test-only
	mctest.InstallLinkCRD(t, dynamic.NewForConfigOrDie(cfg))
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, mctest.Kubeconfig(s.URL, apiservertest.AdminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, []string{"--kubeconfig", kubeconfig, "--admin-addr", admin, "--namespace", "default"}, io.Discard)
	}()
	ready := func() bool {
		resp, err := http.Get("http://" + admin + "/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	if !eventually.Holds(30*time.Second, ready) {
		t.Error("/ready not 200 within 30s")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Main: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("Main did not end within 10s of its context")
	}
}
