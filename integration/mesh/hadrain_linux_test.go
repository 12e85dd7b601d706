package mesh

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// haComponents are the control-plane Deployments --ha runs three replicas
// of, each with a PodDisruptionBudget.
var haComponents = []string{"plexus-identity", "plexus-destination", "plexus-injector", "plexus-sp-validator"}

// TestControlPlaneDrain proves a control plane installed with --ha
// through a node drain, as a node upgrade runs one: under 100 requests/s
// between meshed pods on another node, `kubectl drain` of a node holding
// a replica of every component completes, no request fails, and every
// component is back to three ready replicas, none on the drained node.
// Then the PodDisruptionBudgets are put to the test: evictions of
// destination replicas one after another are allowed while the budget
// has room and refused (429, naming the budget) once it has none.
func TestControlPlaneDrain(t *testing.T) {
	c := clustertest.Connect(t)
	survivor, drained, _ := nodeToFail(t, c)
	env := clustercni.Read(t)
	installAllKeepingCNI(t, c, env, "--ha")
	for _, name := range haComponents {
		c.WaitDeploymentReady(t, controlNamespace, name, 3*time.Minute)
		if !onNode(controlPods(t, c, name), drained) {
			t.Fatalf("%s has no replica on %s to drain: %v", name, drained, controlPods(t, c, name))
		}
	}

	ns := c.Namespace(t, "hadrain", meshLabels)
	clientPod, url := booksAndClientOn(t, c, ns, survivor)()
	sent := outboundRequests(t, c, ns, clientPod)
	load := startSteadyLoad(t, c, ns, clientPod, url, "hadrain")
	waitOutboundRequests(t, c, ns, clientPod, sent+200)

	t.Cleanup(func() { c.Kubectl(t, "uncordon", drained) })
	start := time.Now()
	c.Kubectl(t, "drain", drained, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=180s")
	t.Logf("kubectl drain %s took %v", drained, time.Since(start).Round(time.Second))
	for _, name := range haComponents {
		clustertest.WaitFor(t, 3*time.Minute, name+" back to three ready replicas off "+drained, func(context.Context) (bool, error) {
			dep, err := c.Client.AppsV1().Deployments(controlNamespace).Get(clustertest.Context(t, 30*time.Second), name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			pods := controlPods(t, c, name)
			return dep.Status.ReadyReplicas == 3 && len(pods) == 3 && !onNode(pods, drained), nil
		})
	}
	// A second's more load after the control plane settled, then stop.
	waitOutboundRequests(t, c, ns, clientPod, outboundRequests(t, c, ns, clientPod)+100)
	load.wantAllAnswered(t, 300, "through the drain")

	// The budget: evict the destination replicas back to back. The first
	// evictions are allowed while ready replicas stay at the budget's
	// minimum or above; the one that would go below it is refused.
	pdb, err := c.Client.PolicyV1().PodDisruptionBudgets(controlNamespace).Get(clustertest.Context(t, 30*time.Second), "plexus-destination", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the destination's PodDisruptionBudget: %v", err)
	}
	if pdb.Spec.MinAvailable == nil {
		t.Fatalf("the destination's PodDisruptionBudget sets no minAvailable: %+v", pdb.Spec)
	}
	ready := 3
	allowed := ready - pdb.Spec.MinAvailable.IntValue()
	evicted, refused := 0, false
	for pod := range controlPods(t, c, "plexus-destination") {
		err := c.Client.CoreV1().Pods(controlNamespace).EvictV1(clustertest.Context(t, 30*time.Second), &policyv1.Eviction{
			ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: controlNamespace}})
		switch {
		case err == nil:
			evicted++
		case apierrors.IsTooManyRequests(err) && strings.Contains(err.Error(), "disruption budget"):
			refused = true
		default:
			t.Fatalf("evicting %s: %v", pod, err)
		}
		if refused {
			break
		}
	}
	if evicted != allowed || !refused {
		t.Errorf("evicting the three destination replicas back to back: %d allowed, refused %v; want %d allowed (minAvailable %s) and the next refused",
			evicted, refused, allowed, pdb.Spec.MinAvailable.String())
	}
	c.WaitDeploymentReady(t, controlNamespace, "plexus-destination", 3*time.Minute)
}

// onNode reports whether any of pods (pod → node, as controlPods) runs
// on node.
func onNode(pods map[string]string, node string) bool {
	return slices.Contains(slices.Collect(maps.Values(pods)), node)
}
