package mesh

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// EnvMultiNode set (test.sh does, on the cluster it gives a second node
// in another zone) makes the tests that need two nodes in two zones fail
// rather than skip when the cluster has fewer.
const EnvMultiNode = "PLEXUS_TEST_MULTINODE"

// twoZones returns the zone of each ready node, skipping the test
// (failing it under EnvMultiNode) unless they span two zones.
func twoZones(t *testing.T, c *clustertest.Cluster) map[string]string {
	t.Helper()
	zoneOf := readyNodeZones(t, c)
	if zones := slices.Compact(slices.Sorted(maps.Values(zoneOf))); len(zones) < 2 {
		if os.Getenv(EnvMultiNode) != "" {
			t.Fatalf("%s is set but the cluster's ready nodes are in %d zone(s): %v", EnvMultiNode, len(zones), zoneOf)
		}
		t.Skipf("needs ready nodes in two zones (make cluster-up NODES=2); have %v", zoneOf)
	}
	return zoneOf
}

// TestCrossNode proves the proxies carry each protocol between pods on
// different nodes over mTLS: a client on one node calls a server on
// another over HTTP/1.1, gRPC and an opaque port, every request is
// answered, and both proxies count the traffic as mTLS with the other
// side's identity.
func TestCrossNode(t *testing.T) {
	c := clustertest.Connect(t)
	// Two nodes in different zones.
	zoneOf := twoZones(t, c)
	var nodes []string
	for _, n := range slices.Sorted(maps.Keys(zoneOf)) {
		if len(nodes) == 0 || zoneOf[n] != zoneOf[nodes[0]] {
			nodes = append(nodes, n)
		}
	}
	nodes = nodes[:2]
	env := clustercni.Read(t)
	env.Install(t)
	deployControlPlane(t, c)
	c.WaitDeploymentReady(t, controlNamespace, "plexus-injector", 2*time.Minute)
	ns := c.Namespace(t, "crossnode", meshLabels)

	// The server on one node: HTTP on 8080, gRPC on 9090, and 7070 marked
	// opaque (HTTP inside, which the proxies must not read).
	server := podSpec("far", "serve", "-grpc", ":9090", ":8080", ":7070")
	server.NodeSelector = map[string]string{corev1.LabelHostname: nodes[1]}
	server.Containers[0].Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "grpc", ContainerPort: 9090}, {Name: "opaque", ContainerPort: 7070}}
	deploy(t, c, ns, "far", 0, meshed, server)
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{
		"replicas": 1,
		"template": map[string]any{"metadata": map[string]any{"annotations": map[string]string{podcontract.AnnotationOpaquePorts: "7070"}}},
	}})
	if _, err := c.Client.AppsV1().Deployments(ns).Patch(clustertest.Context(t, time.Minute), "far", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := c.Client.CoreV1().Services(ns).Create(clustertest.Context(t, time.Minute), &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "far"},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": "far"}, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Name: "grpc", Port: 9090, TargetPort: intstr.FromInt32(9090), AppProtocol: ptr("grpc")},
			{Name: "opaque", Port: 7070, TargetPort: intstr.FromInt32(7070)},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The client on the other node: a server only to stay up; the tests
	// run testapp load in it.
	client := podSpec("near", "serve", ":8080")
	client.NodeSelector = map[string]string{corev1.LabelHostname: nodes[0]}
	deploy(t, c, ns, "near", 1, meshed, client)
	c.WaitDeploymentReady(t, ns, "far", 3*time.Minute)
	c.WaitDeploymentReady(t, ns, "near", 3*time.Minute)
	farPod, nearPod := pods(t, c, ns, "far")[0], pods(t, c, ns, "near")[0]
	if farPod.Spec.NodeName == nearPod.Spec.NodeName {
		t.Fatalf("client and server both on %s", farPod.Spec.NodeName)
	}
	t.Logf("client %s on %s, server %s on %s", nearPod.Name, nearPod.Spec.NodeName, farPod.Name, farPod.Spec.NodeName)
	load := func(t *testing.T, args ...string) loadResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		res, err := execLoad(ctx, c, ns, nearPod.Name, args...)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	host := "far." + ns + ".svc.cluster.local"
	clientID := `client_id="spiffe://` + trustDomain + `/ns/` + ns + `/sa/near"`
	serverID := `server_id="spiffe://` + trustDomain + `/ns/` + ns + `/sa/far"`
	const n = 20

	for _, tc := range []struct {
		name, ok string
		args     []string
		metric   string // counted by both proxies, with the peer's identity
	}{
		{"HTTP/1.1", "200", []string{"http://" + host + "/"}, "request_total"},
		{"gRPC", "OK", []string{"-grpc", host + ":9090"}, "request_total"},
		{"opaque", "200", []string{"http://" + host + ":7070/"}, "tcp_open_total"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := sumSeries(t, proxyMetrics(t, c, ns, farPod.Name), tc.metric, `direction="inbound"`, `tls="true"`, clientID)
			res := load(t, append([]string{"-n", itoa(n), "-timeout", "5s"}, tc.args...)...)
			if res.Requests != n || res.Statuses[tc.ok] != n || res.apps()["far"] != n {
				t.Fatalf("%d requests: statuses %v, errors %v, servers %v; want %d %s from far", res.Requests, res.Statuses, res.Errors, res.Servers, n, tc.ok)
			}
			out := proxyMetrics(t, c, ns, nearPod.Name)
			wantSeries(t, out, tc.metric, `direction="outbound"`, `tls="true"`, serverID)
			after := sumSeries(t, proxyMetrics(t, c, ns, farPod.Name), tc.metric, `direction="inbound"`, `tls="true"`, clientID)
			if after <= before {
				t.Errorf("the server's proxy counted no new mTLS %s from near (%v before, %v after)", tc.metric, before, after)
			}
			if tc.metric == "tcp_open_total" {
				// Opaque: the proxies forwarded bytes and parsed no HTTP.
				if v := sumSeries(t, out, "request_total", `direction="outbound"`, `target_addr=`, `:7070"`); v != 0 {
					t.Errorf("the client's proxy counted %v HTTP requests to the opaque port", v)
				}
			}
			t.Logf("%d %s requests across nodes answered %s; p50 %.2f ms", n, tc.name, tc.ok, res.Latency.P50)
		})
	}
}
