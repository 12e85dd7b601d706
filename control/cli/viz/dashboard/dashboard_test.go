package dashboard

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/websocket"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/control/cli/viz"
)

// fakeAPIServer serves pods/portforward as the kubelet does (its
// WebSocket protocol, on golang.org/x/net/websocket as the kubelet's
// wsstream), relaying each forwarded connection to target (the pod's
// port); refuse, when set, answers every forward on the error channel.
type fakeAPIServer struct {
	target string
	refuse string
	mu     sync.Mutex
	paths  []string
}

func (f *fakeAPIServer) start(t *testing.T) *httptest.Server {
	t.Helper()
	ws := websocket.Server{
		Handshake: func(cfg *websocket.Config, r *http.Request) error {
			for _, p := range cfg.Protocol {
				if p == PortForwardProtocol {
					cfg.Protocol = []string{p}
					return nil
				}
			}
			return fmt.Errorf("protocols %v not supported", cfg.Protocol)
		},
		Handler: func(c *websocket.Conn) {
			defer c.Close()
			c.PayloadType = websocket.BinaryFrame
			var port [2]byte
			binary.LittleEndian.PutUint16(port[:], 8084)
			_ = websocket.Message.Send(c, append([]byte{dataChannel}, port[:]...))
			_ = websocket.Message.Send(c, append([]byte{errorChannel}, port[:]...))
			if f.refuse != "" {
				_ = websocket.Message.Send(c, append([]byte{errorChannel}, f.refuse...))
				return
			}
			pod, err := net.Dial("tcp", f.target)
			if err != nil {
				return
			}
			defer pod.Close()
			go func() {
				buf := make([]byte, 70000)
				for {
					n, err := pod.Read(buf)
					if n > 0 {
						if websocket.Message.Send(c, append([]byte{dataChannel}, buf[:n]...)) != nil {
							return
						}
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
			for {
				var msg []byte
				if err := websocket.Message.Receive(c, &msg); err != nil {
					return
				}
				if len(msg) > 0 && msg[0] == dataChannel {
					if _, err := pod.Write(msg[1:]); err != nil {
						return
					}
				}
			}
		},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		f.paths = append(f.paths, r.URL.RequestURI())
		f.mu.Unlock()
		if !strings.HasPrefix(r.URL.Path, "/api/v1/") || !strings.HasSuffix(r.URL.Path, "/portforward") {
			http.Error(w, `{"kind":"Status","message":"forbidden"}`, http.StatusForbidden)
			return
		}
		ws.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// echoServer answers each line with it upper-cased.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, upper{c})
			}()
		}
	}()
	return ln.Addr().String()
}

type upper struct{ r io.Reader }

func (u upper) Read(p []byte) (int, error) {
	n, err := u.r.Read(p)
	copy(p, bytes.ToUpper(p[:n]))
	return n, err
}

func TestPodDialerRelaysBothWays(t *testing.T) {
	api := &fakeAPIServer{target: echoServer(t)}
	srv := api.start(t)
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
	if got := api.paths[0]; got != "/api/v1/namespaces/plexus-viz/pods/web-1/portforward?ports=8084" {
		t.Errorf("asked %s", got)
	}
}

func TestPodDialerErrors(t *testing.T) {
	api := &fakeAPIServer{refuse: "error forwarding port 8084 to pod web-1: connection refused"}
	srv := api.start(t)
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

func webDeployment() *appsv1.Deployment {
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: viz.Namespace, Name: viz.WebDeployment},
		Spec:       appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}},
	}
}

func webPod(name string, ready bool, port int32) *corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: viz.Namespace, Name: name, Labels: map[string]string{"app": "web"}},
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
	api := &fakeAPIServer{target: web.Listener.Addr().String()}
	srv := api.start(t)
	kube := fake.NewClientset(webDeployment(), webPod("web-a", true, 8090), webPod("web-0", false, 8090), webPod("web-b", true, 8090))
	var mu sync.Mutex
	var dialed []string
	gone := "web-a"
	pd := PodDialer{HTTP: srv.Client(), BaseURL: srv.URL}
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
	if err := kube.CoreV1().Pods(viz.Namespace).Delete(context.Background(), "web-a", metav1.DeleteOptions{}); err != nil {
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
