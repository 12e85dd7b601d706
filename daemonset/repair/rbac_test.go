package repair

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
)

// TestRepairWithShippedRBAC runs the repair against a real kube-apiserver
// as a user bound only to the ClusterRole in deploy/plexus-node/rbac.yaml:
// it lists and watches its node's pods (field selector), records the Event
// `kubectl describe pod` shows, and may not delete pods until the optional
// deploy/plexus-node-repair-delete role is bound.
func TestRepairWithShippedRBAC(t *testing.T) {
	a := apiservertest.Start(t)
	ctx := context.Background()
	admin := a.Client(t, apiservertest.AdminToken)
	a.BindShippedRole(t)

	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// No controller manager runs: the ServiceAccount admission needs the
	// default account to exist.
	if _, err := admin.CoreV1().ServiceAccounts("shop").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	web1 := createRunning(t, admin, meshedPod(), "10.244.0.5")
	createRunning(t, admin, meshedPod(func(p *corev1.Pod) { p.Name, p.Spec.NodeName = "web-2", "node-2" }), "10.244.0.6")

	nobody := a.Client(t, apiservertest.NobodyToken)
	if _, err := nobody.CoreV1().Pods("").List(ctx, metav1.ListOptions{}); err == nil {
		t.Fatal("an unbound user could list pods")
	}

	agent := a.Client(t, apiservertest.AgentToken)
	// What the informer does: list, then watch, only this node's pods.
	onNode := metav1.ListOptions{FieldSelector: "spec.nodeName=" + node}
	list, err := agent.CoreV1().Pods("").List(ctx, onNode)
	if err != nil || len(list.Items) != 1 || list.Items[0].Name != "web-1" {
		t.Fatalf("listing the node's pods as the agent: %v (%d pods)", err, len(list.Items))
	}
	onNode.ResourceVersion = list.ResourceVersion
	w, err := agent.CoreV1().Pods("").Watch(ctx, onNode)
	if err != nil {
		t.Fatalf("watching the node's pods as the agent: %v", err)
	}
	w.Stop()

	r, tables, metrics := newRepairer(t, agent, Apply)
	runUntilCleanup(t, r)
	describe := metav1.ListOptions{FieldSelector: "involvedObject.kind=Pod,involvedObject.namespace=shop,involvedObject.name=web-1,involvedObject.uid=" + string(web1.UID)}
	waitFor(t, "the RedirectRepaired event on web-1", func() bool {
		evs, err := admin.CoreV1().Events("shop").List(ctx, describe)
		return err == nil && len(evs.Items) == 1 && evs.Items[0].Reason == ReasonRepaired
	})
	// Resyncs check web-1 again; web-2 (another node) is never listed.
	waitFor(t, "two more checks", func() bool { return testutil.ToFloat64(metrics.Checked) >= 3 })
	if tables.applied() != 1 || testutil.ToFloat64(metrics.Repairs.WithLabelValues("failed")) != 0 {
		t.Errorf("%d applies, %v failures; want 1 and 0", tables.applied(), testutil.ToFloat64(metrics.Repairs.WithLabelValues("failed")))
	}

	// Delete mode: forbidden with the shipped role alone.
	del, _, _ := newRepairer(t, agent, Delete)
	if _, err := del.Sync(ctx, web1); err == nil {
		t.Fatal("the shipped role may delete pods")
	}
	a.BindRole(t, "plexus-node-repair-delete/rbac.yaml")
	waitFor(t, "delete to be allowed", func() bool {
		out, err := del.Sync(ctx, web1)
		return err == nil && out == Deleted
	})
	// No kubelet confirms the deletion: the pod is terminating.
	got, err := admin.CoreV1().Pods("shop").Get(ctx, "web-1", metav1.GetOptions{})
	if err == nil && got.DeletionTimestamp == nil {
		t.Error("web-1 is not being deleted")
	}
}

// createRunning creates pod as admin and marks it Running with ip, as a
// kubelet would.
func createRunning(t *testing.T, admin kubernetes.Interface, pod *corev1.Pod, ip string) *corev1.Pod {
	t.Helper()
	ctx := context.Background()
	pod = pod.DeepCopy()
	pod.UID, pod.ResourceVersion = "", ""
	pod.Spec.Containers[0].Image = "plexus.dev/testapp:dev"
	pod.Spec.Containers[1].Image = "plexus.dev/plexus-proxy:dev"
	status := pod.Status
	created, err := admin.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status = status
	created.Status.PodIP, created.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
	updated, err := admin.CoreV1().Pods(pod.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return updated
}
