package localcluster

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// EnvAddedNode names a node integration/cluster/node.sh added to the
// running cluster; TestAddedNode runs only when it is set (make test's
// first up/down cycle adds node 2 and sets it).
const EnvAddedNode = "PLEXUS_CLUSTER_ADDED_NODE"

// TestAddedNode: a node node.sh added is Ready in its zone, its pods and
// node 1's reach each other by pod IP both ways, its pods resolve names
// through cluster DNS (on node 1), and the API server reaches its kubelet
// (logs, exec). With flannel as the primary CNI (make test's flannel
// cycle sets PLEXUS_CLUSTER_CNI), flannel gave each pod its address: in
// its node's pod CIDR, the node announced by flannel.
func TestAddedNode(t *testing.T) {
	added := os.Getenv(EnvAddedNode)
	if added == "" {
		t.Skip(EnvAddedNode + " is not set (make test sets it once node.sh added a node)")
	}
	c := clustertest.Connect(t)
	ctx := clustertest.Context(t, 3*time.Minute)
	node, err := c.Client.CoreV1().Nodes().Get(ctx, added, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if zone := node.Labels[corev1.LabelTopologyZone]; zone == "" {
		t.Errorf("node %s has no zone label", added)
	}
	nodes, err := c.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := ""
	for _, n := range nodes.Items {
		if n.Name != added && first == "" {
			first = n.Name
		}
	}
	if first == "" {
		t.Fatalf("no node besides %s", added)
	}

	ns := c.Namespace(t, "nodes", nil)
	ips := map[string]string{}
	for name, on := range map[string]string{"here": first, "there": added} {
		createServer(t, ctx, c, ns, name, on, nil)
	}
	clustertest.WaitFor(t, 2*time.Minute, "both pods ready", func(ctx context.Context) (bool, error) {
		for _, name := range []string{"here", "there"} {
			p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil || !clustertest.PodReady(p) {
				return false, err
			}
			ips[name] = p.Status.PodIP
		}
		return true, nil
	})

	for _, hop := range [][2]string{{"here", "there"}, {"there", "here"}} {
		out := c.Kubectl(t, "-n", ns, "exec", hop[0], "--", "/testapp", "get", "http://"+ips[hop[1]]+":8080/across")
		if !strings.Contains(out, "hello from "+hop[1]+" ") {
			t.Errorf("%s → %s (%s): %q, want an answer from %s", hop[0], hop[1], ips[hop[1]], out, hop[1])
		}
	}
	if out := c.Kubectl(t, "-n", ns, "exec", "there", "--", "/testapp", "lookup", "kubernetes.default.svc.cluster.local"); !strings.Contains(out, "10.96.0.1") {
		t.Errorf("cluster DNS from %s: %q, want 10.96.0.1", added, out)
	}
	if out := c.Kubectl(t, "-n", ns, "logs", "there"); !strings.Contains(out, "serving on :8080 as there") {
		t.Errorf("kubectl logs of a pod on %s: %q", added, out)
	}
	if os.Getenv("PLEXUS_CLUSTER_CNI") == "flannel" {
		for name, on := range map[string]string{"here": first, "there": added} {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, on, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if n.Annotations["flannel.alpha.coreos.com/public-ip"] == "" || n.Annotations["flannel.alpha.coreos.com/backend-type"] != "host-gw" {
				t.Errorf("node %s has no flannel host-gw annotations: %v", on, n.Annotations)
			}
			cidr, err := netip.ParsePrefix(n.Spec.PodCIDR)
			ip, ierr := netip.ParseAddr(ips[name])
			if err != nil || ierr != nil || !cidr.Contains(ip) {
				t.Errorf("pod %s has %s, not in node %s's pod CIDR %q", name, ips[name], on, n.Spec.PodCIDR)
			}
		}
	}
}

// TestAddedNodeImagesRefreshedOnReuse: cluster-up, reusing a running
// cluster, imports the images into every node's containerd, not node 1's
// alone (import_images_all), or a node node.sh added would keep running
// the images it started with. An image removed from the added node's
// containerd is there again after it.
func TestAddedNodeImagesRefreshedOnReuse(t *testing.T) {
	added := os.Getenv(EnvAddedNode)
	if added == "" {
		t.Skip(EnvAddedNode + " is not set (make test sets it once node.sh added a node)")
	}
	sock := filepath.Join(os.Getenv("PLEXUS_CLUSTER_RUN_DIR"), "nodes", added, "containerd", "containerd.sock")
	const image = "plexus.dev/demoapp:dev" // no test's pod runs it
	has := func() bool {
		out, err := exec.Command("ctr", "--address", sock, "-n", "k8s.io", "images", "ls", "-q", "name=="+image).CombinedOutput()
		if err != nil {
			t.Fatalf("listing %s's images: %v: %s", added, err, out)
		}
		return strings.TrimSpace(string(out)) == image
	}
	if !has() {
		t.Fatalf("%s's containerd does not hold %s before the test", added, image)
	}
	t.Cleanup(func() {
		if !has() { // put back what the test took, should the refresh have failed
			_ = exec.Command("ctr", "--address", sock, "-n", "k8s.io", "images", "import", "--no-unpack", "../../images/demoapp.tar").Run()
		}
	})
	if out, err := exec.Command("ctr", "--address", sock, "-n", "k8s.io", "images", "rm", image).CombinedOutput(); err != nil {
		t.Fatalf("removing %s from %s: %v: %s", image, added, err, out)
	}
	if has() {
		t.Fatalf("%s still lists %s after its removal", added, image)
	}
	// What up.sh runs when it reuses a running cluster.
	refresh := exec.Command("bash", "-c", `source ../cluster/env.sh && source ../cluster/lib.sh && import_images_all`)
	if out, err := refresh.CombinedOutput(); err != nil {
		t.Fatalf("import_images_all: %v: %s", err, out)
	}
	if !has() {
		t.Errorf("%s's containerd does not hold %s after import_images_all", added, image)
	}
	up, err := os.ReadFile("../cluster/up.sh")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(up), "\timport_images_all\n") {
		t.Error("up.sh's reuse path does not call import_images_all")
	}
}

// createServer creates pod name in ns running testapp serve :8080, ready
// once it answers, on node (any when "") with labels.
func createServer(t *testing.T, ctx context.Context, c *clustertest.Cluster, ns, name, node string, labels map[string]string) {
	t.Helper()
	_, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{
			Name: "app", Image: testappImage, ImagePullPolicy: corev1.PullNever, Args: []string{"serve", ":8080"},
			ReadinessProbe: &corev1.Probe{
				ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}},
				PeriodSeconds: 1,
			},
		}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}
