package webhookserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/control/webhookcert"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

func TestRunServesTheKeptCertificateAndReportsReady(t *testing.T) {
	client := fake.NewClientset(&admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "hook", ResourceVersion: "1"},
		Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "hook.plexus.dev"}},
	})
	log := slog.New(slog.DiscardHandler)
	var mu sync.Mutex
	addrs := map[string]string{}
	started := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, Config{
			Addr: "webhook", AdminAddr: "admin",
			Routes:   map[string]http.Handler{"/validate": http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "validated") })},
			Registry: prometheus.NewRegistry(),
			Start:    func(context.Context) error { <-started; return nil },
			Listen: func(network, name string) (net.Listener, error) {
				ln, err := net.Listen(network, "127.0.0.1:0")
				if err == nil {
					mu.Lock()
					addrs[name] = ln.Addr().String()
					mu.Unlock()
				}
				return ln, err
			},
			Cert: webhookcert.Config{Namespace: "plexus-system", Service: "hook", Secret: "hook-tls", WebhookConfig: "hook", Validating: true},
			Log:  log,
		}, client)
	}()
	addr := func(name string) string {
		t.Helper()
		var a string
		eventually.Within(t, 10*time.Second, "the "+name+" listener", func() bool {
			mu.Lock()
			defer mu.Unlock()
			a = addrs[name]
			return a != ""
		})
		return a
	}
	readyCode := func() int {
		resp, err := http.Get("http://" + addr("admin") + "/ready")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := readyCode(); c != http.StatusServiceUnavailable {
		t.Errorf("/ready before Start finished: %d", c)
	}
	close(started)
	// The webhook listener opens after the certificate is in place and
	// Start has run: only then is the Secret sure to exist.
	webhookAddr := addr("webhook")
	s, err := client.CoreV1().Secrets("plexus-system").Get(ctx, "hook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(s.Data["ca.crt"])
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "hook.plexus-system.svc"}}}
	resp, err := hc.Post("https://"+webhookAddr+"/validate", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "validated" {
		t.Errorf("webhook answered %q", body)
	}
	if c := readyCode(); c != http.StatusOK {
		t.Errorf("/ready while serving: %d", c)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}
