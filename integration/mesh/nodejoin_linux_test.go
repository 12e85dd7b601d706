package mesh

import (
	"context"
	"os"
	"os/exec"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestNodeJoinsTainted proves that a node joining a cluster with Plexus
// installed gets the plugin before any meshed pod is scheduled on it.
// The node registers with the plexus.dev/cni-not-ready:NoSchedule taint,
// as a node image built for Plexus does (`node.sh add --cni-not-ready`);
// a meshed server bound to that node, created before it joins, waits
// unscheduled until the node agent's
// DaemonSet pod, which tolerates it, has installed the plugin there and
// removed the taint; then it starts, and its traffic from a client on
// another node arrives through its proxy over mTLS. The node is removed
// when the test ends. It adds a node, so it runs with EnvMultiNode only.
func TestNodeJoinsTainted(t *testing.T) {
	env := clustercni.Read(t)
	if os.Getenv(EnvMultiNode) == "" {
		t.Skipf("adds a node to the local cluster: set %s (make test does)", EnvMultiNode)
	}
	if os.Geteuid() != 0 {
		t.Fatal("needs root to add a node")
	}
	c := clustertest.Connect(t)
	installAllKeepingCNI(t, c, env)
	ns := c.Namespace(t, "join", meshLabels)

	const number = "9"
	node := addedNodePrefix + number
	server := podSpec("server", "serve", ":8080")
	server.NodeSelector = map[string]string{corev1.LabelHostname: node}
	deploy(t, c, ns, "server", 1, meshed, server)
	service(t, c, ns, "server", 8080)

	// Watch the node from before it exists: its first version must carry
	// the taint, a later one lose it.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	w, err := c.Client.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	t.Cleanup(func() {
		out, err := exec.Command("../cluster/node.sh", "remove", number).CombinedOutput()
		if err != nil {
			t.Errorf("node.sh remove %s: %v: %s", number, err, out)
		}
	})
	if out, err := exec.Command("../cluster/node.sh", "add", "--cni-not-ready", number).CombinedOutput(); err != nil {
		t.Fatalf("node.sh add --cni-not-ready %s: %v: %s", number, err, out)
	}
	tainted := func(n *corev1.Node) bool {
		for _, taint := range n.Spec.Taints {
			if taint.Key == podcontract.NodeTaintKey && taint.Effect == corev1.TaintEffectNoSchedule {
				return true
			}
		}
		return false
	}
	var untaintedAt time.Time
	first := true
	for untaintedAt.IsZero() {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch of node %s ended before its taint was removed", node)
			}
			n, isNode := ev.Object.(*corev1.Node)
			if !isNode {
				continue
			}
			if first && !tainted(n) {
				t.Fatalf("node %s registered without the %s taint: %v", node, podcontract.NodeTaintKey, n.Spec.Taints)
			}
			first = false
			if !tainted(n) {
				untaintedAt = time.Now()
			}
		case <-ctx.Done():
			t.Fatalf("node %s still has the %s taint after 5 minutes (the node agent did not remove it)", node, podcontract.NodeTaintKey)
		}
	}

	// The server was held by the taint, and scheduled after it went.
	c.WaitDeploymentReady(t, ns, "server", 3*time.Minute)
	pod := pods(t, c, ns, "server")[0]
	if pod.Spec.NodeName != node {
		t.Fatalf("server runs on %s, want %s", pod.Spec.NodeName, node)
	}
	events, err := c.Client.CoreV1().Events(ns).List(clustertest.Context(t, 30*time.Second), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("involvedObject.name", pod.Name).String()})
	if err != nil {
		t.Fatal(err)
	}
	var scheduledAt time.Time
	for _, e := range events.Items {
		if e.Reason == "Scheduled" {
			scheduledAt = e.EventTime.Time
			if scheduledAt.IsZero() {
				scheduledAt = e.FirstTimestamp.Time
			}
		}
	}
	// Event times have a second's resolution at worst. (Whether the
	// scheduler logged the taint as the reason depends on whether the node
	// was Ready before the agent removed it; the order is what counts.)
	if scheduledAt.IsZero() || scheduledAt.Before(untaintedAt.Add(-time.Second)) {
		t.Errorf("%s was scheduled at %v, the taint was removed at %v: want after", pod.Name, scheduledAt, untaintedAt)
	}

	// It is meshed: a client on node 1 reaches it through its proxy over
	// mTLS.
	client := podSpec("client", "poll", "-interval=100ms", "http://server."+ns+".svc.cluster.local/")
	client.NodeSelector = map[string]string{corev1.LabelHostname: env.NodeName}
	deploy(t, c, ns, "client", 1, meshed, client)
	c.WaitDeploymentReady(t, ns, "client", 3*time.Minute)
	clustertest.WaitFor(t, time.Minute, "mTLS requests at the server's proxy", func(context.Context) (bool, error) {
		return sumSeries(t, proxyMetrics(t, c, ns, pod.Name), "request_total", `direction="inbound"`, `tls="true"`,
			`client_id="spiffe://`+trustDomain+`/ns/`+ns+`/sa/client"`) > 0, nil
	})
	t.Logf("node %s joined tainted; the taint went %v; %s was scheduled at %v", node, untaintedAt.Format(time.RFC3339Nano), pod.Name, scheduledAt.Format(time.RFC3339))
}
