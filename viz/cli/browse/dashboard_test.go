package browse

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/control/cli/portforward"
	"github.com/plexus-mesh/plexus/control/cli/portforward/portforwardtest"
	"github.com/plexus-mesh/plexus/viz/viznames"
)

func webDeployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: viznames.Namespace, Name: viznames.WebDeployment},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
}

func webPod(name string, ready bool, port int32) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: viznames.Namespace, Name: name, Labels: map[string]string{"app": "web"}},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
	if port != 0 {
		p.Spec.Containers = []corev1.Container{{Name: "web", Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: 9994}, {Name: "http", ContainerPort: port}}}}
	}
	return p
}

// TestDashboard runs the command against a fake cluster: an HTTP GET of
// the printed URL reaches the fake dashboard through the port-forward; a
// pod that went away is replaced by another ready one.
func TestDashboard(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "dashboard for %s", r.Host)
	}))
	defer web.Close()
	api := &portforwardtest.APIServer{Target: web.Listener.Addr().String()}
	srv := api.Start(t)
	kube := fake.NewClientset(webDeployment(), webPod("web-a", true, 8090), webPod("web-0", false, 8090), webPod("web-b", true, 8090))
	var mu sync.Mutex
	var dialed []string
	gone := "web-a"
	pd := portforward.PodDialer{HTTP: srv.Client(), BaseURL: srv.URL}
	outR, outW := io.Pipe()
	opened := make(chan string, 1)
	d := Dashboard{
		Kube: kube,
		Dial: func(ctx context.Context, ns, pod string, port uint16) (io.ReadWriteCloser, error) {
			mu.Lock()
			dialed = append(dialed, fmt.Sprintf("%s/%s:%d", ns, pod, port))
			mu.Unlock()
			if pod == gone {
				return nil, errors.New("pod web-a not found")
			}
			return pd.Dial(ctx, ns, pod, port)
		},
		Out: outW, Err: io.Discard,
		Browser: func(url string) error { opened <- url; return nil },
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- d.Run(ctx, Config{Address: "127.0.0.1", Port: 0, Show: ShowBrowser}) }()
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url, ok := strings.CutPrefix(strings.TrimSpace(line), "Plexus dashboard available at: ")
	if !ok || !strings.HasPrefix(url, "http://localhost:") {
		t.Fatalf("printed %q", line)
	}
	if got := <-opened; got != url {
		t.Errorf("browser opened %s, want %s", got, url)
	}
	// web-a, picked first, goes away: the first connection finds it gone.
	if err := kube.CoreV1().Pods(viznames.Namespace).Delete(context.Background(), "web-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if want := "dashboard for " + strings.TrimPrefix(url, "http://"); string(body) != want {
		t.Errorf("GET %s: %q, want %q", url, body, want)
	}
	cancel()
	if err := <-errc; err != nil {
		t.Errorf("Run: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(dialed, " ") != "plexus-viz/web-a:8090 plexus-viz/web-b:8090" {
		t.Errorf("dialed %v: want web-a (gone), then web-b", dialed)
	}
}

func TestDashboardNotInstalled(t *testing.T) {
	d := Dashboard{Kube: fake.NewClientset(), Out: io.Discard, Err: io.Discard}
	err := d.Run(context.Background(), Config{Address: "127.0.0.1", Show: ShowURL})
	if err == nil || !strings.Contains(err.Error(), "plexusctl viz install") {
		t.Errorf("without the extension: %v", err)
	}
	d.Kube = fake.NewClientset(webDeployment(), webPod("web-0", false, 0))
	err = d.Run(context.Background(), Config{Address: "127.0.0.1", Show: ShowURL})
	if err == nil || !strings.Contains(err.Error(), "no ready pod of plexus-viz/plexus-web (of 1)") {
		t.Errorf("no ready pod: %v", err)
	}
}

func TestConfigAndURL(t *testing.T) {
	if err := (Config{Address: DefaultAddress, Port: DefaultPort, Show: ShowBrowser}).Validate(); err != nil {
		t.Error(err)
	}
	err := (Config{Port: 70000, Show: "tv"}).Validate()
	for _, want := range []string{"port 70000", "no address", `show "tv"`} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate: %v, want %q", err, want)
		}
	}
	for addr, want := range map[string]string{"127.0.0.1": "http://localhost:50750", "::1": "http://localhost:50750", "0.0.0.0": "http://0.0.0.0:50750", "fd00::1": "http://[fd00::1]:50750"} {
		if got := URL(addr, 50750); got != want {
			t.Errorf("URL(%s) = %s, want %s", addr, got, want)
		}
	}
	if p := podPort(webPod("x", true, 0)); p != webPort {
		t.Errorf("port without an http port: %d", p)
	}
	if runtime.GOOS != "darwin" {
		if SystemBrowser(func(string) string { return "" }) != nil {
			t.Error("a browser without a display")
		}
		if SystemBrowser(func(k string) string { return map[string]string{"WAYLAND_DISPLAY": "wayland-0"}[k] }) == nil {
			t.Error("no browser with a Wayland display")
		}
	}
}
