package localcluster

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// bAPIServer is cluster b's API server, in its control plane's network
// namespace on b's nodes' bridge (integration/cluster/env.sh).
const bAPIServer = "10.214.0.250:6443"

// TestClusterPair: the two clusters make cluster-up CLUSTERS=2 brings up
// are two: control planes of their own (kube-system's UIDs differ), nodes
// named and addressed apart, each its own service range and DNS, and a
// pod in each serves its cluster through its Service. Not linked (no
// routes between the clusters yet: issue 27's next step), neither
// cluster's pods reach the other's pods, nor a's pods b's API server.
func TestClusterPair(t *testing.T) {
	a, b := clustertest.Pair(t)
	ctx := clustertest.Context(t, 4*time.Minute)
	clusters := []struct {
		name, nodePrefix, apiIP, podNet string
		c                               *clustertest.Cluster
	}{
		{"a", "plexus-local", "10.96.0.1", "10.244.", a},
		{"b", "plexus-b-", "10.97.0.1", "10.245.", b},
	}

	uids := map[string]string{}
	for _, cl := range clusters {
		ns, err := cl.c.Client.CoreV1().Namespaces().Get(ctx, "kube-system", metav1.GetOptions{})
		if err != nil {
			t.Fatalf("cluster %s: %v", cl.name, err)
		}
		if other, ok := uids[string(ns.UID)]; ok {
			t.Fatalf("clusters %s and %s have the same kube-system (UID %s): one control plane", other, cl.name, ns.UID)
		}
		uids[string(ns.UID)] = cl.name
		nodes, err := cl.c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(nodes.Items) == 0 {
			t.Errorf("cluster %s has no node", cl.name)
		}
		for _, n := range nodes.Items {
			if !strings.HasPrefix(n.Name, cl.nodePrefix) {
				t.Errorf("cluster %s has node %s, want only %s*", cl.name, n.Name, cl.nodePrefix)
			}
		}
		svc, err := cl.c.Client.CoreV1().Services("default").Get(ctx, "kubernetes", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.ClusterIP != cl.apiIP {
			t.Errorf("cluster %s's kubernetes Service is %s, want %s", cl.name, svc.Spec.ClusterIP, cl.apiIP)
		}
	}

	type server struct{ ns, ip string }
	servers := map[string]server{}
	for _, cl := range clusters {
		ns := cl.c.Namespace(t, "pair", nil)
		ip := startPairServer(t, ctx, cl.c, ns)
		if !strings.HasPrefix(ip, cl.podNet) {
			t.Errorf("cluster %s's pod has %s, want one in %s0.0/16", cl.name, ip, cl.podNet)
		}
		servers[cl.name] = server{ns, ip}
		out := cl.c.Kubectl(t, "-n", ns, "exec", "server", "--", "/testapp", "lookup", "kubernetes.default.svc.cluster.local")
		if !strings.Contains(out, cl.apiIP) {
			t.Errorf("cluster DNS in %s: kubernetes.default is %q, want %s", cl.name, out, cl.apiIP)
		}
		out = cl.c.Kubectl(t, "-n", ns, "exec", "server", "--", "/testapp", "get", "http://server."+ns+".svc.cluster.local:8080/pair")
		if !strings.Contains(out, "hello from server ") {
			t.Errorf("cluster %s's pod through its Service: %q", cl.name, out)
		}
	}

	// Apart: a request across fails, and fast (no route: the pods have no
	// default route and the clusters none to each other).
	for _, hop := range []struct{ from, to, target string }{
		{"a", "b", servers["b"].ip + ":8080"},
		{"b", "a", servers["a"].ip + ":8080"},
		{"a", "b's API server", bAPIServer},
	} {
		from := map[string]*clustertest.Cluster{"a": a, "b": b}[hop.from]
		out := from.Kubectl(t, "-n", servers[hop.from].ns, "exec", "server", "--",
			"/testapp", "load", "-n", "1", "-timeout", "2s", "http://"+hop.target+"/")
		var s struct {
			Statuses map[string]int `json:"statuses"`
			Errors   map[string]int `json:"errors"`
		}
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("testapp load from %s: %v: %q", hop.from, err, out)
		}
		if s.Statuses["error"] != 1 || len(s.Errors) == 0 {
			t.Errorf("a pod in %s reached %s (%s) with the clusters unlinked: %s", hop.from, hop.to, hop.target, out)
		}
	}
}

// startPairServer runs testapp serve as pod "server" with a Service
// "server" in ns, and returns the pod's address once it is ready.
func startPairServer(t *testing.T, ctx context.Context, c *clustertest.Cluster, ns string) string {
	t.Helper()
	labels := map[string]string{"app": "server"}
	createServer(t, ctx, c, ns, "server", "", labels)
	_, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec:       corev1.ServiceSpec{Selector: labels, Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ip string
	clustertest.WaitFor(t, 2*time.Minute, "pod server ready in "+ns, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "server", metav1.GetOptions{})
		if err != nil || !clustertest.PodReady(p) {
			return false, err
		}
		ip = p.Status.PodIP
		return true, nil
	})
	return ip
}
