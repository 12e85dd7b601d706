package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexus-mesh/plexus/sidecar/discovery"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

const testappImage = "plexus.dev/testapp:dev"

// meshLabels make a test namespace opt into injection.
var meshLabels = map[string]string{"plexus.dev/inject": "enabled"}

// podSpec runs testapp with args as service account sa.
func podSpec(sa string, args ...string) corev1.PodSpec {
	return corev1.PodSpec{
		ServiceAccountName:            sa,
		TerminationGracePeriodSeconds: ptr(int64(10)),
		Containers: []corev1.Container{{
			Name: "app", Image: testappImage, ImagePullPolicy: corev1.PullNever, Args: args,
		}},
	}
}

// Whether a workload joins the mesh; the test namespaces opt in, so an
// unmeshed workload opts out.
const (
	meshed   = true
	unmeshed = false
)

// deploy creates a service account and a Deployment named name; an
// unmeshed one opts out of injection.
func deploy(t *testing.T, c *clustertest.Cluster, ns, name string, replicas int32, mesh bool, spec corev1.PodSpec) {
	t.Helper()
	ctx := clustertest.Context(t, time.Minute)
	if _, err := c.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: spec.ServiceAccountName}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("creating service account %s: %v", spec.ServiceAccountName, err)
	}
	labels := map[string]string{"app": name}
	var annotations map[string]string
	if !mesh {
		annotations = map[string]string{"plexus.dev/inject": "disabled"}
	}
	_, err := c.Client.AppsV1().Deployments(ns).Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels, Annotations: annotations}, Spec: spec},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating deployment %s: %v", name, err)
	}
}

// service exposes port 80 of the pods labelled app=name on targetPort.
func service(t *testing.T, c *clustertest.Cluster, ns, name string, targetPort int32) {
	t.Helper()
	serviceFor(t, c, ns, name, name, targetPort)
}

// serviceFor creates Service name, port 80, in front of app's pods.
func serviceFor(t *testing.T, c *clustertest.Cluster, ns, name, app string, targetPort int32) {
	t.Helper()
	ctx := clustertest.Context(t, time.Minute)
	_, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": app},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(targetPort)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service %s: %v", name, err)
	}
}

// pods returns the running, not terminating pods of app name.
func pods(t *testing.T, c *clustertest.Cluster, ns, name string) []corev1.Pod {
	t.Helper()
	ctx := clustertest.Context(t, 30*time.Second)
	list, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app=" + name})
	if err != nil {
		t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning {
			out = append(out, p)
		}
	}
	return out
}

// proxyMetrics reads a pod's proxy metrics through the API server.
func proxyMetrics(t *testing.T, c *clustertest.Cluster, ns, pod string) string {
	t.Helper()
	ctx := clustertest.Context(t, 30*time.Second)
	raw, err := c.Client.CoreV1().Pods(ns).ProxyGet("http", pod, "4191", "/metrics", nil).DoRaw(ctx)
	if err != nil {
		t.Fatalf("metrics of %s/%s: %v", ns, pod, err)
	}
	return string(raw)
}

// pollLine is one line of `testapp poll` output.
type pollLine struct {
	At   time.Time
	OK   bool
	Text string // the answer's first line, or the error
}

// pollLog parses the log of a `testapp poll` container.
func pollLog(t *testing.T, c *clustertest.Cluster, ns, pod string) []pollLine {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	logs, err := c.Logs(ctx, ns, pod, "app")
	if err != nil {
		t.Fatal(err)
	}
	var out []pollLine
	for _, l := range strings.Split(logs, "\n") {
		ts, rest, ok := strings.Cut(l, " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil {
			continue
		}
		status, text, _ := strings.Cut(rest, " ")
		out = append(out, pollLine{At: at, OK: status == "ok", Text: text})
	}
	return out
}

// since returns the lines at or after t0.
func since(lines []pollLine, t0 time.Time) []pollLine {
	var out []pollLine
	for _, l := range lines {
		if !l.At.Before(t0) {
			out = append(out, l)
		}
	}
	return out
}

// host is the pod that answered ("hello from HOST ..."); false for an
// error or another answer.
func (l pollLine) host() (string, bool) {
	var host string
	if _, err := fmt.Sscanf(l.Text, "hello from %s", &host); err != nil || !l.OK {
		return "", false
	}
	return host, true
}

// servedBy counts answers per serving host ("hello from HOST ...").
func servedBy(lines []pollLine) (hosts map[string]int, errs []string) {
	hosts = map[string]int{}
	for _, l := range lines {
		if !l.OK {
			errs = append(errs, l.At.Format(time.RFC3339Nano)+" "+l.Text)
			continue
		}
		if host, ok := l.host(); ok {
			hosts[host]++
		}
	}
	return hosts, errs
}

// firstAnswers is, by serving host, when its first answer in lines came,
// from t0 (negative: before it).
func firstAnswers(lines []pollLine, t0 time.Time) map[string]string {
	firsts := map[string]string{}
	for _, l := range lines {
		if host, ok := l.host(); ok && firsts[host] == "" {
			firsts[host] = l.At.Sub(t0).Round(10 * time.Millisecond).String()
		}
	}
	return firsts
}

func ptr[T any](v T) *T { return &v }

func itoa(i int) string { return strconv.Itoa(i) }

// proxyEndpoints summarizes, one endpoint set per line, what the pod's
// proxy holds on its admin /endpoints — each endpoint's address, state,
// estimate and pending requests — or why it could not be read: for
// failure messages only, short enough to survive a truncated CI log.
func proxyEndpoints(t *testing.T, c *clustertest.Cluster, ns, pod string) string {
	t.Helper()
	sets, err := proxyEndpointSets(clustertest.Context(t, 10*time.Second), c, ns, pod)
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	var b strings.Builder
	for _, set := range sets {
		fmt.Fprintf(&b, "\n  %s (%s/%s):", set.Destination, set.Labels["namespace"], set.Labels["service"])
		for _, ep := range set.Endpoints {
			fmt.Fprintf(&b, " %s %s ewma=%.1fms pending=%d;", ep.Addr, ep.State, ep.EWMAms, ep.Pending)
		}
	}
	return b.String()
}

// proxyEndpointSets reads the endpoint sets a pod's proxy holds from its
// admin /endpoints (loopback only, so asked from the pod's app container).
func proxyEndpointSets(ctx context.Context, c *clustertest.Cluster, ns, pod string) ([]discovery.EndpointSet, error) {
	out, err := kubectlOutput(ctx, c, "", "-n", ns, "exec", pod, "-c", "app", "--",
		"/testapp", "get", "http://127.0.0.1:4191/endpoints")
	if err != nil {
		return nil, err
	}
	_, body, _ := strings.Cut(out, "\n") // after "resolved 127.0.0.1 to 127.0.0.1"
	var sets []discovery.EndpointSet
	if err := json.Unmarshal([]byte(body), &sets); err != nil {
		return nil, fmt.Errorf("%v: %.200s", err, body)
	}
	return sets, nil
}

// proxyHoldsReady reports whether the pod's proxy holds, for service,
// an endpoint in state ready at the IP of each of want ready pods
// labelled app=service.
func proxyHoldsReady(t *testing.T, c *clustertest.Cluster, ns, pod, service string, want int) bool {
	t.Helper()
	sets, err := proxyEndpointSets(clustertest.Context(t, 10*time.Second), c, ns, pod)
	if err != nil {
		t.Logf("reading %s's proxy endpoints: %v", pod, err)
		return false
	}
	held := map[string]bool{}
	for _, set := range sets {
		if set.Labels["service"] != service {
			continue
		}
		for _, ep := range set.Endpoints {
			if ap, err := netip.ParseAddrPort(ep.Addr); err == nil && ep.Ready() {
				held[ap.Addr().String()] = true
			}
		}
	}
	n := 0
	for _, p := range pods(t, c, ns, service) {
		if clustertest.PodReady(&p) && held[p.Status.PodIP] {
			n++
		}
	}
	return n == want
}

// proxyEWMAs reads the peak-EWMA estimates (ms) a pod's proxy holds, by
// the Service of each endpoint set, then by endpoint address.
func proxyEWMAs(ctx context.Context, c *clustertest.Cluster, ns, pod string) (map[string]map[string]float64, error) {
	sets, err := proxyEndpointSets(ctx, c, ns, pod)
	if err != nil {
		return nil, err
	}
	ewmas := map[string]map[string]float64{}
	for _, set := range sets {
		svc := set.Labels["service"]
		if ewmas[svc] == nil {
			ewmas[svc] = map[string]float64{}
		}
		for _, ep := range set.Endpoints {
			ewmas[svc][ep.Addr] = ep.EWMAms
		}
	}
	return ewmas, nil
}
