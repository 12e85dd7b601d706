package plugin

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/control/meshpod"
)

// kubeconfigFor writes a kubeconfig pointing at srv with a bearer token.
func kubeconfigFor(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	kc := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q, insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: secret-token}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`, srv.URL)
	if err := os.WriteFile(path, []byte(kc), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

const podJSON = `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"app","uid":"u1",
"annotations":{"config.plexus.dev/skip-outbound-ports":"25"}},
"spec":{"containers":[{"name":"app","image":"x"},{"name":"plexus-proxy","image":"y"}]}}`

const unavailableJSON = `{"apiVersion":"v1","kind":"Status","status":"Failure","message":"etcd is sad","reason":"ServiceUnavailable","code":503}`

func TestRESTPodGetterAgainstHTTPServer(t *testing.T) {
	var requests, failFirst atomic.Int32
	failFirst.Store(1)
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.Header.Get("Authorization") != "Bearer secret-token" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		if r.Method != http.MethodGet || r.URL.Path != "/api/v1/namespaces/app/pods/web" {
			http.Error(w, "unexpected "+r.Method+" "+r.URL.Path, http.StatusBadRequest)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if failFirst.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = w.Write([]byte(unavailableJSON))
			return
		}
		_, _ = w.Write([]byte(podJSON))
	}))
	defer srv.Close()

	g, err := NewKubeconfigPodGetter(kubeconfigFor(t, srv), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	retry := Retry{Attempts: 3, PerAttempt: time.Second, Backoff: time.Millisecond}
	pod, err := getPod(context.Background(), g, retry, "app", "web")
	if err != nil {
		t.Fatal(err)
	}
	if requests.Load() != 2 {
		t.Fatalf("%d requests, want 2 (one 503, one success; no hidden client-go retries)", requests.Load())
	}
	if !meshpod.IsMeshed(pod) || pod.UID != "u1" || pod.Annotations["config.plexus.dev/skip-outbound-ports"] != "25" {
		t.Fatalf("decoded pod %+v", pod)
	}

	// Always unavailable: exactly Attempts requests, reported as transient.
	requests.Store(0)
	failFirst.Store(100)
	_, err = getPod(context.Background(), g, retry, "app", "web")
	if err == nil || !transient(err) || requests.Load() != 3 || !strings.Contains(err.Error(), "etcd is sad") {
		t.Fatalf("persistent 503: %v after %d requests", err, requests.Load())
	}

	// Unreachable server: transient, bounded.
	srv.Close()
	start := time.Now()
	_, err = getPod(context.Background(), g, retry, "app", "web")
	if err == nil || !transient(err) || time.Since(start) > 5*time.Second {
		t.Fatalf("closed server: %v after %v", err, time.Since(start))
	}
}
