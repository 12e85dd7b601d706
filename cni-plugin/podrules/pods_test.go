package podrules

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/mesh/meshpod"
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

func TestHTTPPodGetterAgainstHTTPServer(t *testing.T) {
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
	pod, err := GetPod(context.Background(), g, retry, "app", "web")
	if err != nil {
		t.Fatal(err)
	}
	if requests.Load() != 2 {
		t.Fatalf("%d requests, want 2 (one 503, one success; no hidden client-go retries)", requests.Load())
	}
	if !isMeshed(pod) || pod.UID != "u1" || pod.Annotations["config.plexus.dev/skip-outbound-ports"] != "25" {
		t.Fatalf("decoded pod %+v", pod)
	}

	// Always unavailable: exactly Attempts requests, reported as Transient.
	requests.Store(0)
	failFirst.Store(100)
	_, err = GetPod(context.Background(), g, retry, "app", "web")
	if err == nil || !Transient(err) || requests.Load() != 3 || !strings.Contains(err.Error(), "etcd is sad") {
		t.Fatalf("persistent 503: %v after %d requests", err, requests.Load())
	}

	// Unreachable server: Transient, bounded.
	srv.Close()
	start := time.Now()
	_, err = GetPod(context.Background(), g, retry, "app", "web")
	if err == nil || !Transient(err) || time.Since(start) > 5*time.Second {
		t.Fatalf("closed server: %v after %v", err, time.Since(start))
	}
}

func TestHTTPPodGetterRejectsOddNames(t *testing.T) {
	g := &HTTPPodGetter{}
	for _, nn := range [][2]string{{"app", ""}, {"", "web"}, {"app", ".."}, {"app", "a/b"}, {"app", "a%2Fb"}, {"app", "web?watch=1"}} {
		if _, err := g.GetPod(context.Background(), nn[0], nn[1]); err == nil || !strings.Contains(err.Error(), "invalid pod") {
			t.Errorf("%q/%q: %v", nn[0], nn[1], err)
		}
	}
}

// TestIsMeshedMatchesMeshpod holds isMeshed, on a pod decoded from JSON as
// the API server sends it, to mesh/meshpod.IsMeshed.
func TestIsMeshedMatchesMeshpod(t *testing.T) {
	if ProxyContainerName != meshpod.ProxyContainerName {
		t.Fatalf("ProxyContainerName %q, meshpod says %q", ProxyContainerName, meshpod.ProxyContainerName)
	}
	always, never, onFailure := corev1.ContainerRestartPolicyAlways, corev1.ContainerRestartPolicy("Never"), corev1.ContainerRestartPolicy("OnFailure")
	app, proxy := corev1.Container{Name: "app"}, corev1.Container{Name: ProxyContainerName}
	withPolicy := func(c corev1.Container, p *corev1.ContainerRestartPolicy) corev1.Container {
		c.RestartPolicy = p
		return c
	}
	for _, tc := range []struct {
		name              string
		containers, inits []corev1.Container
	}{
		{"app only", []corev1.Container{app}, nil},
		{"proxy container", []corev1.Container{app, proxy}, nil},
		{"proxy container with a restart policy", []corev1.Container{app, withPolicy(proxy, &always)}, nil},
		{"native sidecar", []corev1.Container{app}, []corev1.Container{withPolicy(proxy, &always)}},
		{"init container without restartPolicy", []corev1.Container{app}, []corev1.Container{proxy}},
		{"init container restartPolicy Never", []corev1.Container{app}, []corev1.Container{withPolicy(proxy, &never)}},
		{"init container restartPolicy OnFailure", []corev1.Container{app}, []corev1.Container{withPolicy(proxy, &onFailure)}},
		{"other native sidecar", []corev1.Container{app}, []corev1.Container{{Name: "plexus-proxyx", RestartPolicy: &always}}},
		{"no containers", nil, nil},
	} {
		p := &corev1.Pod{TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"}, Spec: corev1.PodSpec{Containers: tc.containers, InitContainers: tc.inits}}
		body, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		decoded, err := DecodePod("application/json", body)
		if err != nil {
			t.Fatal(err)
		}
		if got, want := isMeshed(decoded), meshpod.IsMeshed(p); got != want {
			t.Errorf("%s: isMeshed = %v, meshpod.IsMeshed = %v", tc.name, got, want)
		}
	}
	if isMeshed(nil) {
		t.Error("nil pod is meshed")
	}
}

func TestDecodePod(t *testing.T) {
	pod, err := DecodePod("application/json; charset=utf-8", []byte(podJSON))
	if err != nil || pod.Name != "web" || pod.Namespace != "app" || pod.UID != "u1" || len(pod.Spec.Containers) != 2 {
		t.Fatalf("decoded %+v, %v", pod, err)
	}
	for _, tc := range []struct{ contentType, body, want string }{
		{"application/vnd.kubernetes.protobuf", "k8s\x00...", "not JSON"},
		{"application/json", unavailableJSON, `a "Status", not a Pod`},
		{"application/json", `{"kind":"Pod","metadata":[]}`, "decoding the pod"},
	} {
		if _, err := DecodePod(tc.contentType, []byte(tc.body)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s: %v, want an error containing %q", tc.contentType, tc.body, err, tc.want)
		}
	}
}

// TestResponseErrorAndTransient reads failed answers as client-go would
// and classifies them as its apierrors predicates do.
func TestResponseErrorAndTransient(t *testing.T) {
	status := func(code int, reason, msg string) string {
		return fmt.Sprintf(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":%q,"reason":%q,"code":%d}`, msg, reason, code)
	}
	for _, tc := range []struct {
		code        int
		contentType string
		body        string
		wantMsg     string
		Transient   bool
	}{
		{404, "application/json", status(404, "NotFound", `pods "web" not found`), `pods "web" not found`, false},
		{403, "application/json", status(403, "Forbidden", `pods "web" is forbidden: User "x" cannot get`), "is forbidden", false},
		{401, "application/json", status(401, "Unauthorized", "Unauthorized"), "Unauthorized", false},
		{503, "application/json", status(503, "ServiceUnavailable", "etcd is sad"), "etcd is sad", true},
		{500, "application/json", status(500, "InternalError", "boom"), "boom", true},
		{504, "application/json", status(504, "Timeout", "too slow"), "too slow", true},
		{500, "application/json", status(500, "ServerTimeout", "later"), "later", true},
		{429, "application/json", status(429, "TooManyRequests", "slow down"), "slow down", true},
		{502, "text/plain; charset=utf-8", "bad gateway from the load balancer\n", "502 Bad Gateway: bad gateway from the load balancer", false},
		{503, "text/html", "<html>down</html>", "503 Service Unavailable: <html>down</html>", true},
		{429, "application/octet-stream", "\x00\x01", "429 Too Many Requests", true},
		{400, "application/json", `{"kind":"Pod"}`, "400 Bad Request", false},
	} {
		err := ResponseError(tc.code, tc.contentType, []byte(tc.body))
		if err.Code != tc.code || !strings.Contains(err.Error(), tc.wantMsg) || Transient(err) != tc.Transient {
			t.Errorf("%d %s %s: %#v (%v), Transient %v; want message %q, Transient %v", tc.code, tc.contentType, tc.body, err, err, Transient(err), tc.wantMsg, tc.Transient)
		}
		if wrapped := fmt.Errorf("GET pod: %w", err); Transient(wrapped) != tc.Transient {
			t.Errorf("%d: wrapping changes the classification", tc.code)
		}
	}
}
