package podlookup

import (
	"context"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/plexus-mesh/plexus/cni-plugin/podrules"
)

// serve runs the real handler on a real socket and returns its path.
func serve(t *testing.T, m *Metrics, pods ...*corev1.Pod) string {
	t.Helper()
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for _, p := range pods {
		if err := idx.Add(p); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(t.TempDir(), "pods.sock")
	l, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, l, Handler(listersv1.NewPodLister(idx), m)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return sock
}

func newMetrics(t *testing.T) *Metrics {
	m := NewMetrics(prometheus.NewRegistry())
	return m
}

// TestPluginReadsPodsFromTheAgent pairs the agent's handler with the
// plugin's own getter over a real unix socket.
func TestPluginReadsPodsFromTheAgent(t *testing.T) {
	m := newMetrics(t)
	web := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "app", Name: "web", UID: "u-1",
			Annotations: map[string]string{"config.plexus.dev/skip-outbound-ports": "25"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app"}, {Name: podrules.ProxyContainerName}}},
	}
	sock := serve(t, m, web)
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v, %v; want 0600", fi.Mode(), err)
	}
	g := podrules.NewAgentPodGetter(sock, time.Second)
	ctx := context.Background()

	got, err := g.GetPod(ctx, "app", "web")
	if err != nil {
		t.Fatalf("lookup of a cached pod: %v", err)
	}
	if got.UID != "u-1" || got.Annotations["config.plexus.dev/skip-outbound-ports"] != "25" || len(got.Spec.Containers) != 2 {
		t.Errorf("pod from the agent = %+v", got)
	}

	_, err = g.GetPod(ctx, "app", "other")
	var apiErr *podrules.APIError
	if !errors.As(err, &apiErr) || apiErr.Code != http.StatusNotFound || apiErr.Reason != "NotFound" {
		t.Errorf("lookup of an uncached pod: err = %v, want a NotFound APIError", err)
	}

	client := http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	for _, path := range []string{"/v1/pods/app", "/v1/pods/app/web/x", "/v1/pods//web", "/metrics"} {
		resp, err := client.Get("http://plexus-node" + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET %s: %d, want 400", path, resp.StatusCode)
		}
	}

	for result, want := range map[string]float64{"hit": 1, "miss": 1, "invalid": 4} {
		if got := testutil.ToFloat64(m.Lookups.WithLabelValues(result)); got != want {
			t.Errorf("lookups{result=%q} = %v, want %v", result, got, want)
		}
	}
}

func TestListenReplacesOnlyASocket(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "pods.sock")
	if err := os.WriteFile(file, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l, err := Listen(file); err == nil {
		l.Close()
		t.Fatal("Listen replaced a regular file")
	}

	stale := filepath.Join(dir, "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	l, err = Listen(stale)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	l.Close()
}
