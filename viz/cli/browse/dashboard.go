// Package browse is plexusctl viz dashboard: a local port forwarded,
// through the API server with the caller's credentials, to a ready pod of
// the viz extension's web Deployment; its URL printed, and opened in a
// browser where there is a display.
package browse

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/cli/portforward"
	"github.com/plexus-mesh/plexus/viz/viznames"
)

// Defaults, and the web's port when its pod names none "http"
// (plexus-control web's --addr).
const (
	DefaultPort    = 50750
	DefaultAddress = "127.0.0.1"
	webPort        = 8084
)

// What Run shows.
const (
	// ShowBrowser prints the URL and opens it in a browser when there is
	// a display.
	ShowBrowser = "browser"
	// ShowURL prints the URL only.
	ShowURL = "url"
	// ShowNone prints nothing.
	ShowNone = "none"
)

// Config is the command line.
type Config struct {
	Address string
	Port    int // 0: any free port
	Show    string
}

// Validate reports every setting that cannot work.
func (c Config) Validate() error {
	var errs []error
	if c.Port < 0 || c.Port > 65535 {
		errs = append(errs, fmt.Errorf("port %d: want 0-65535", c.Port))
	}
	if c.Address == "" {
		errs = append(errs, errors.New("no address"))
	}
	if !slices.Contains([]string{ShowBrowser, ShowURL, ShowNone}, c.Show) {
		errs = append(errs, fmt.Errorf("show %q: want browser, url or none", c.Show))
	}
	return errors.Join(errs...)
}

// Dashboard forwards. Its fields are what tests replace.
type Dashboard struct {
	Kube kubernetes.Interface
	// Dial connects to a pod's port (portforward.PodDialer.Dial).
	Dial     func(ctx context.Context, ns, pod string, port uint16) (io.ReadWriteCloser, error)
	Out, Err io.Writer
	// Browser opens a URL; nil when there is no browser to open.
	Browser func(url string) error
}

// Run forwards cfg's local port to the dashboard until ctx ends. A
// connection the pod in use refuses makes the next one look for a ready
// pod again (the pod may have been replaced).
func (d Dashboard) Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	pod, port, err := d.pick(ctx)
	if err != nil {
		return fmt.Errorf("dashboard: %w", err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(cfg.Address, strconv.Itoa(cfg.Port)))
	if err != nil {
		return fmt.Errorf("dashboard: %w (another port: --port)", err)
	}
	url := URL(cfg.Address, ln.Addr().(*net.TCPAddr).Port)
	if cfg.Show != ShowNone {
		fmt.Fprintf(d.Out, "Plexus dashboard available at: %s\n", url)
	}
	if cfg.Show == ShowBrowser && d.Browser != nil {
		if err := d.Browser(url); err != nil {
			fmt.Fprintf(d.Err, "plexusctl viz dashboard: could not open a browser: %v\n", err)
		}
	}
	var mu sync.Mutex
	dial := func(ctx context.Context) (io.ReadWriteCloser, error) {
		mu.Lock()
		p, pt := pod, port
		mu.Unlock()
		c, err := d.Dial(ctx, viznames.Namespace, p, pt)
		if err == nil || ctx.Err() != nil {
			return c, err
		}
		np, npt, perr := d.pick(ctx)
		if perr != nil || np == p {
			return nil, err
		}
		mu.Lock()
		pod, port = np, npt
		mu.Unlock()
		return d.Dial(ctx, viznames.Namespace, np, npt)
	}
	return portforward.Forward(ctx, ln, dial, func(err error) { fmt.Fprintf(d.Err, "plexusctl viz dashboard: %v\n", err) })
}

// URL is the dashboard's address as a browser should ask for it: the web
// answers to localhost (and the loopback addresses), refusing other Host
// names (DNS rebinding).
func URL(address string, port int) string {
	host := address
	switch address {
	case "127.0.0.1", "localhost", "::1":
		host = "localhost"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(port))
}

// pick returns a ready pod of the web Deployment (the first by name) and
// the web's port in it.
func (d Dashboard) pick(ctx context.Context) (string, uint16, error) {
	dep, err := d.Kube.AppsV1().Deployments(viznames.Namespace).Get(ctx, viznames.WebDeployment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return "", 0, fmt.Errorf("Deployment %s/%s not found: is the viz extension installed (plexusctl viz install | kubectl apply -f -)?", viznames.Namespace, viznames.WebDeployment)
	}
	if err != nil {
		return "", 0, fmt.Errorf("reading Deployment %s/%s: %w", viznames.Namespace, viznames.WebDeployment, err)
	}
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil || sel.Empty() {
		return "", 0, fmt.Errorf("Deployment %s/%s has no usable selector", viznames.Namespace, viznames.WebDeployment)
	}
	pods, err := d.Kube.CoreV1().Pods(viznames.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	if err != nil {
		return "", 0, fmt.Errorf("listing the pods of %s/%s: %w", viznames.Namespace, viznames.WebDeployment, err)
	}
	var ready []*corev1.Pod
	for i := range pods.Items {
		if p := &pods.Items[i]; isReady(p) {
			ready = append(ready, p)
		}
	}
	if len(ready) == 0 {
		return "", 0, fmt.Errorf("no ready pod of %s/%s (of %d): kubectl -n %s get pods -l %s", viznames.Namespace, viznames.WebDeployment, len(pods.Items), viznames.Namespace, sel)
	}
	slices.SortFunc(ready, func(a, b *corev1.Pod) int { return cmp.Compare(a.Name, b.Name) })
	return ready[0].Name, podPort(ready[0]), nil
}

func isReady(p *corev1.Pod) bool {
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podPort is the pod's container port named http, else webPort.
func podPort(p *corev1.Pod) uint16 {
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "http" && cp.ContainerPort > 0 && cp.ContainerPort <= 65535 {
				return uint16(cp.ContainerPort)
			}
		}
	}
	return webPort
}

// SystemBrowser returns a function that opens a URL with xdg-open (open
// on macOS), or nil when getenv finds no display (DISPLAY or
// WAYLAND_DISPLAY; macOS always has one).
func SystemBrowser(getenv func(string) string) func(url string) error {
	cmd := "xdg-open"
	switch {
	case runtime.GOOS == "darwin":
		cmd = "open"
	case getenv("DISPLAY") == "" && getenv("WAYLAND_DISPLAY") == "":
		return nil
	}
	return func(url string) error {
		c := exec.Command(cmd, url)
		c.Stdout, c.Stderr = io.Discard, os.Stderr
		if err := c.Start(); err != nil {
			return err
		}
		go func() { _ = c.Wait() }()
		return nil
	}
}
