package mesh

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestNodeFailure proves the mesh rides out a node's death: a meshed
// client on a surviving node calls a Service with two replicas there and
// two on another node at 200 requests/s, and the other node drops off
// the network as a machine that lost power does. Kubernetes takes its
// endpoints out only when the node controller gives up on it (about
// 50 s), so until then requests to them go nowhere. The meshed client's
// balancer must stop sending to them within 5 s (balance/silence.go) and
// fail no more requests than an unmeshed client whose requests spread
// over the replicas as the mesh's do (a new connection per request, so
// that kube-proxy picks a replica for each). An unmeshed client with a
// keep-alive pool runs beside them for the record: it sends nearly all
// its requests over one or two connections, to one or two replicas, so
// it loses little to the failure and balances nothing.
func TestNodeFailure(t *testing.T) {
	c := clustertest.Connect(t)
	survivor, doomed, doomedNumber := nodeToFail(t, c)
	env := clustercni.Read(t)
	env.Install(t)
	deployControlPlane(t, c)
	c.WaitDeploymentReady(t, controlNamespace, "plexus-injector", 2*time.Minute)
	ns := c.Namespace(t, "nodefail", meshLabels)

	// Each server: four replicas, two per node (spread by hostname over
	// the two nodes only); each client on the surviving node.
	onNodes := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{survivor, doomed}}},
		}}},
	}}
	workloads := []struct {
		server, client string
		mesh           bool
	}{{"books", "client", meshed}, {"plainbooks", "plainclient", unmeshed}}
	for _, w := range workloads {
		server := podSpec(w.server, "serve", ":8080")
		server.Affinity = onNodes
		server.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{
			MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": w.server}},
		}}
		deploy(t, c, ns, w.server, 4, w.mesh, server)
		service(t, c, ns, w.server, 8080)
		client := podSpec(w.client, "serve", ":8080")
		client.NodeSelector = map[string]string{corev1.LabelHostname: survivor}
		deploy(t, c, ns, w.client, 1, w.mesh, client)
	}
	clientPod := map[string]string{}
	for _, w := range workloads {
		c.WaitDeploymentReady(t, ns, w.server, 3*time.Minute)
		c.WaitDeploymentReady(t, ns, w.client, 3*time.Minute)
		clientPod[w.client] = pods(t, c, ns, w.client)[0].Name
		onDoomed := 0
		for _, p := range pods(t, c, ns, w.server) {
			if p.Spec.NodeName == doomed {
				onDoomed++
			}
		}
		if onDoomed != 2 {
			t.Fatalf("%s: %d of its 4 replicas on %s; want 2", w.server, onDoomed, doomed)
		}
	}
	url := func(server string) string { return "http://" + server + "." + ns + ".svc.cluster.local/" }
	type side struct {
		name, client, server string
		args                 []string
		res                  loadResult
		err                  error
	}
	sides := []*side{
		{name: "meshed", client: "client", server: "books"},
		{name: "unmeshed, a connection per request", client: "plainclient", server: "plainbooks", args: []string{"-new-conn"}},
		{name: "unmeshed, keep-alive pool", client: "plainclient", server: "plainbooks"},
	}
	meshedSide, spreadSide, pooledSide := sides[0], sides[1], sides[2]

	// Warm up: every request answered, and every replica answers the
	// meshed client, so that its proxy holds all four.
	res, err := execLoad(clustertest.Context(t, time.Minute), c, ns, clientPod["client"], "-n", "200", "-c", "8", "-timeout", "5s", url("books"))
	if err != nil {
		t.Fatal(err)
	}
	if res.Statuses["200"] != 200 || len(res.Servers) != 4 {
		t.Fatalf("meshed warm-up: statuses %v, servers %v; want 200 answers from 4 replicas", res.Statuses, res.Servers)
	}
	unresponsiveBefore := sumSeries(t, proxyMetrics(t, c, ns, clientPod["client"]), "outbound_http_balancer_unresponsive_total", `backend_name="books"`)

	// The load: 200/s for 40 s from each client, the node cut off once
	// the meshed client's proxy has sent 1,000 of its requests (5 s).
	const rate, seconds, healthy = 200, 40, 1000
	sent := outboundRequests(t, c, ns, clientPod["client"])
	var wg sync.WaitGroup
	for _, s := range sides {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			args := append([]string{"-rate", itoa(rate), "-duration", itoa(seconds) + "s", "-c", "128", "-timeout", "2s", "-timeline"}, s.args...)
			s.res, s.err = execLoad(ctx, c, ns, clientPod[s.client], append(args, url(s.server))...)
		})
	}
	waitOutboundRequests(t, c, ns, clientPod["client"], sent+healthy)
	cut := time.Now()
	isolateNode(t, c, doomed, doomedNumber)
	wg.Wait()

	// Each side: the requests that failed after the cut, when the last of
	// them started, and how many replicas answered before it.
	type outcome struct {
		failed     int
		lastFailed time.Duration
		report     string
	}
	outcomes := map[*side]outcome{}
	for _, s := range sides {
		if s.err != nil {
			t.Fatalf("%s load: %v", s.name, s.err)
		}
		o := outcome{lastFailed: -1}
		before := 0
		servedBefore := map[string]bool{}
		var failedAt []string
		for _, x := range s.res.Timeline {
			at := time.Unix(0, x.StartUnixNano).Sub(cut)
			ended := at + time.Duration(x.MS*float64(time.Millisecond))
			switch {
			case x.Status == "200":
				if at < 0 {
					servedBefore[x.Server] = true
				}
			case ended < 0: // failed before the cut (one in flight at it counts after)
				before++
			default:
				o.failed++
				o.lastFailed = max(o.lastFailed, at)
				if len(failedAt) < 10 {
					failedAt = append(failedAt, at.Round(time.Millisecond).String())
				}
			}
		}
		if before > 0 {
			t.Errorf("%s: %d requests failed before the node was cut off", s.name, before)
		}
		o.report = fmt.Sprintf("%s: %d requests, %d replicas answered before the cut; %d failed after it", s.name, len(s.res.Timeline), len(servedBefore), o.failed)
		if o.failed > 0 {
			o.report += fmt.Sprintf(" (the last started %v after it; the first ten started at %v)", o.lastFailed.Round(time.Millisecond), failedAt)
		}
		t.Log(o.report)
		outcomes[s] = o
	}
	m, spread := outcomes[meshedSide], outcomes[spreadSide]
	if m.lastFailed > 5*time.Second {
		t.Errorf("meshed: a request that started %v after the node was cut off failed; want the balancer off the dead node's endpoints within 5s", m.lastFailed.Round(time.Millisecond))
	}
	if m.failed > spread.failed {
		t.Errorf("the meshed client failed %d requests, the unmeshed one whose requests spread over the replicas %d; want the mesh to do no worse\n%s\n%s",
			m.failed, spread.failed, m.report, spread.report)
	}
	after := sumSeries(t, proxyMetrics(t, c, ns, clientPod["client"]), "outbound_http_balancer_unresponsive_total", `backend_name="books"`)
	if after <= unresponsiveBefore {
		t.Errorf("the client proxy marked no books endpoint unresponsive (outbound_http_balancer_unresponsive_total %v before, %v after)", unresponsiveBefore, after)
	}
	t.Logf("the client proxy marked books endpoints unresponsive %v times; the pooled unmeshed client failed %d", after-unresponsiveBefore, outcomes[pooledSide].failed)
}

// nodeToFail returns a ready node this host is (the survivor) and an
// added one that node.sh can cut off, with its number; it skips the test
// (fails it under EnvMultiNode) when the cluster has no added node.
func nodeToFail(t *testing.T, c *clustertest.Cluster) (survivor, doomed, number string) {
	t.Helper()
	ready := readyNodeZones(t, c)
	for _, name := range slices.Sorted(maps.Keys(ready)) {
		n, ok := strings.CutPrefix(name, addedNodePrefix)
		switch {
		case ok && doomed == "":
			doomed, number = name, n
		case !ok && survivor == "":
			survivor = name
		}
	}
	if survivor == "" || doomed == "" {
		if os.Getenv(EnvMultiNode) != "" {
			t.Fatalf("%s is set but the cluster has no ready added node beside this host's: %v", EnvMultiNode, ready)
		}
		t.Skipf("needs a ready added node (make cluster-up NODES=2); have %v", ready)
	}
	return survivor, doomed, number
}

// addedNodePrefix names the nodes integration/cluster/node.sh adds
// (plexus-local-N, N from 2); node 1 is this host.
const addedNodePrefix = "plexus-local-"

// isolateNode cuts node off the network with node.sh (its link down) and,
// when the test ends, reconnects it and waits until it is Ready again.
func isolateNode(t *testing.T, c *clustertest.Cluster, node, number string) {
	t.Helper()
	nodeScript := func(args ...string) error {
		out, err := exec.Command("../cluster/node.sh", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("node.sh %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	// Registered first: whatever isolate did, the node comes back.
	t.Cleanup(func() {
		if err := nodeScript("reconnect", number); err != nil {
			t.Error(err)
			return
		}
		clustertest.WaitFor(t, 3*time.Minute, "node "+node+" Ready again", func(ctx context.Context) (bool, error) {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				return false, err // retried: the API server may be busy
			}
			for _, cond := range n.Status.Conditions {
				if cond.Type == corev1.NodeReady {
					return cond.Status == corev1.ConditionTrue, nil
				}
			}
			return false, nil
		})
	})
	if err := nodeScript("isolate", number); err != nil {
		t.Fatal(err)
	}
}

// outboundRequests is how many requests pod's proxy has sent out.
func outboundRequests(t *testing.T, c *clustertest.Cluster, ns, pod string) float64 {
	t.Helper()
	return sumSeries(t, proxyMetrics(t, c, ns, pod), "request_total", `direction="outbound"`)
}

// waitOutboundRequests waits (up to a minute) until pod's proxy has sent
// n requests out: a load in the pod has made that much progress. A
// failed read of the metrics is retried.
func waitOutboundRequests(t *testing.T, c *clustertest.Cluster, ns, pod string, n float64) {
	t.Helper()
	clustertest.WaitFor(t, time.Minute, fmt.Sprintf("%s's proxy to have sent %.0f requests", pod, n), func(ctx context.Context) (bool, error) {
		raw, err := c.Client.CoreV1().Pods(ns).ProxyGet("http", pod, "4191", "/metrics", nil).DoRaw(ctx)
		if err != nil {
			return false, err
		}
		return sumSeries(t, string(raw), "request_total", `direction="outbound"`) >= n, nil
	})
}
