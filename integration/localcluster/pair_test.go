package localcluster

import (
	"context"
	"encoding/json"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestClusterPair: the two clusters make cluster-up CLUSTERS=2 brings up
// are two: control planes of their own (kube-system's UIDs differ), nodes
// named and addressed apart, each its own service range and DNS, and a
// pod in each serves its cluster through its Service. Then the network
// between them in each of pair.sh's modes, both ways: isolated, no pod
// reaches the other cluster at all; flat, pods reach the other's pods,
// which see the client pod's own address, and its nodes (API server,
// NodePort); hierarchical, only its nodes, which see a node's address,
// and pod to pod is refused. A refusal is immediate (one request, 2 s).
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

	type server struct{ ns, ip, nodePort string }
	servers := map[string]server{}
	for _, cl := range clusters {
		ns := cl.c.Namespace(t, "pair", nil)
		ip, nodePort := startPairServer(t, ctx, cl.c, ns)
		if !strings.HasPrefix(ip, cl.podNet) {
			t.Errorf("cluster %s's pod has %s, want one in %s0.0/16", cl.name, ip, cl.podNet)
		}
		servers[cl.name] = server{ns, ip, nodePort}
		out := cl.c.Kubectl(t, "-n", ns, "exec", "server", "--", "/testapp", "lookup", "kubernetes.default.svc.cluster.local")
		if !strings.Contains(out, cl.apiIP) {
			t.Errorf("cluster DNS in %s: kubernetes.default is %q, want %s", cl.name, out, cl.apiIP)
		}
		out = cl.c.Kubectl(t, "-n", ns, "exec", "server", "--", "/testapp", "get", "http://server."+ns+".svc.cluster.local:8080/pair")
		if !strings.Contains(out, "hello from server ") {
			t.Errorf("cluster %s's pod through its Service: %q", cl.name, out)
		}
	}
	in := map[string]*clustertest.Cluster{"a": a, "b": b}
	// probe sends one request from the server pod in cluster from to url,
	// with no retry; it returns whether an answer came, and then, from a
	// testapp server (echo), the address it saw the request come from.
	probe := func(from, url string, echo bool) (reached bool, remote string) {
		t.Helper()
		c, ns := in[from], servers[from].ns
		out := c.Kubectl(t, "-n", ns, "exec", "server", "--", "/testapp", "load", "-n", "1", "-timeout", "2s", url)
		var s struct {
			Statuses map[string]int `json:"statuses"`
		}
		if err := json.Unmarshal([]byte(out), &s); err != nil {
			t.Fatalf("testapp load from %s: %v: %q", from, err, out)
		}
		if s.Statuses["error"] == 1 {
			return false, ""
		}
		if !echo {
			return true, ""
		}
		out = c.Kubectl(t, "-n", ns, "exec", "server", "--", "/testapp", "get", url+"?echo=1")
		var e struct {
			Remote string `json:"remote"`
		}
		if i := strings.Index(out, "{"); i < 0 || json.Unmarshal([]byte(out[i:]), &e) != nil {
			t.Fatalf("echo from %s via %s: %q", url, from, out)
		}
		host, _, _ := net.SplitHostPort(e.Remote)
		return true, host
	}

	// What each hop is, and in which modes it must pass; passing, what the
	// server must see it from: the client pod's own address (flat), or not
	// one of the client cluster's pod addresses (hierarchical: a node's).
	podOnly, nodes := map[string]bool{"flat": true}, map[string]bool{"flat": true, "hierarchical": true}
	hops := []struct {
		what, from, url string
		echo            bool // a testapp server: the test reads what it saw
		passes          map[string]bool
	}{
		{"a's pod to b's pod", "a", "http://" + servers["b"].ip + ":8080/", true, podOnly},
		{"b's pod to a's pod", "b", "http://" + servers["a"].ip + ":8080/", true, podOnly},
		{"a's pod to b's API server", "a", "http://" + clustertest.BAPIServer + "/", false, nodes},
		{"b's pod to a's API server", "b", "http://10.213.0.1:6443/", false, nodes},
		{"b's pod to the host's address on b's bridge (a's API server)", "b", "http://10.214.0.254:6443/", false, podOnly},
		{"a's pod to b's NodePort", "a", "http://10.214.0.1:" + servers["b"].nodePort + "/", true, nodes},
		{"b's pod to a's NodePort", "b", "http://10.213.0.1:" + servers["a"].nodePort + "/", true, nodes},
	}
	mode := clustertest.PairMode(t, "")
	t.Cleanup(func() { clustertest.PairMode(t, mode) })
	for _, m := range []string{"isolated", "flat", "hierarchical"} {
		clustertest.PairMode(t, m)
		t.Run(m, func(t *testing.T) {
			for _, h := range hops {
				reached, remote := probe(h.from, h.url, h.echo)
				t.Logf("%s (%s): reached %v, seen from %q", h.what, h.url, reached, remote)
				switch {
				case reached != h.passes[m]:
					t.Errorf("%s (%s): reached %v, want %v", h.what, h.url, reached, h.passes[m])
				case !reached || remote == "":
				case m == "flat" && strings.HasSuffix(h.what, "pod") && remote != servers[h.from].ip:
					t.Errorf("%s: the server saw %s, want the client pod's own %s", h.what, remote, servers[h.from].ip)
				case m == "hierarchical" && strings.HasPrefix(remote, map[string]string{"a": "10.244.", "b": "10.245."}[h.from]):
					t.Errorf("%s: the server saw the client pod's address %s, want a node's", h.what, remote)
				}
			}
		})
	}
}

// startPairServer runs testapp serve as pod "server" with a NodePort
// Service "server" in ns, and returns the pod's address once it is ready,
// and the node port.
func startPairServer(t *testing.T, ctx context.Context, c *clustertest.Cluster, ns string) (ip, nodePort string) {
	t.Helper()
	labels := map[string]string{"app": "server"}
	createServer(t, ctx, c, ns, "server", "", labels)
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "server"},
		Spec: corev1.ServiceSpec{
			Type: corev1.ServiceTypeNodePort, Selector: labels,
			Ports: []corev1.ServicePort{{Port: 8080, TargetPort: intstr.FromInt32(8080)}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clustertest.WaitFor(t, 2*time.Minute, "pod server ready in "+ns, func(ctx context.Context) (bool, error) {
		p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "server", metav1.GetOptions{})
		if err != nil || !clustertest.PodReady(p) {
			return false, err
		}
		ip = p.Status.PodIP
		return true, nil
	})
	return ip, strconv.Itoa(int(svc.Spec.Ports[0].NodePort))
}
