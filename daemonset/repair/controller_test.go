package repair

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// startRun runs the controller until the test ends.
func startRun(t *testing.T, h *harness) { runUntilCleanup(t, h.r) }

func runUntilCleanup(t *testing.T, r *Repairer) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, r.cfg, r.deps) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Error("Run did not return after its context ended")
		}
	})
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually.Within(t, 10*time.Second, what, cond)
}

// TestRunRepairsPodOnceItHasAnIP drives the informer and queue: a meshed
// pod without IP is left alone until an update gives it one, then it is
// repaired once, and resyncs (every second here) change nothing more.
func TestRunRepairsPodOnceItHasAnIP(t *testing.T) {
	noIP := meshedPod(func(p *corev1.Pod) {
		p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodPending, "", nil
	})
	h := newHarness(t, Apply, noIP)
	startRun(t, h)
	ctx := context.Background()

	// Let the informer list the pod and a resync pass over it.
	// Sleep: nothing marks a resync the controller skipped the pod in.
	time.Sleep(1500 * time.Millisecond)
	if h.tables.applied() != 0 || testutil.ToFloat64(h.metrics.Checked) != 0 {
		t.Fatalf("a pod without IP was checked (%v) or applied (%d)", testutil.ToFloat64(h.metrics.Checked), h.tables.applied())
	}

	running := meshedPod()
	running.ResourceVersion = "2"
	if _, err := h.client.CoreV1().Pods("shop").UpdateStatus(ctx, running, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the rules to be applied", func() bool { return h.tables.applied() == 1 })
	waitFor(t, "the RedirectRepaired event", func() bool { return len(h.events(t)) == 1 })

	// Two more resyncs: checked again, nothing applied, no new Event.
	checks := testutil.ToFloat64(h.metrics.Checked)
	waitFor(t, "two resync checks", func() bool { return testutil.ToFloat64(h.metrics.Checked) >= checks+2 })
	if h.tables.applied() != 1 || len(h.events(t)) != 1 || h.count("applied") != 1 {
		t.Errorf("after resyncs: %d applies, %d events, applied=%v; want 1 each", h.tables.applied(), len(h.events(t)), h.count("applied"))
	}
}

// TestRunIgnoresOtherNodesPods: the field selector keeps other nodes' pods
// out of the informer; Sync refuses them as well. A pod of this node's,
// listed with it, is repaired and checked again on a resync: by then the
// other node's pod has had its turns.
func TestRunIgnoresOtherNodesPods(t *testing.T) {
	other := meshedPod(func(p *corev1.Pod) { p.Spec.NodeName = "node-2" })
	local := meshedPod(func(p *corev1.Pod) {
		p.Name, p.UID = "web-2", "uid-web-2"
		p.Status.PodIP, p.Status.PodIPs = "fd00::5", []corev1.PodIP{{IP: "fd00::5"}}
	})
	h := newHarness(t, Apply, other, local)
	startRun(t, h)
	waitFor(t, "this node's pod to be repaired", func() bool { return h.tables.applied() >= 1 })
	checks := testutil.ToFloat64(h.metrics.Checked)
	waitFor(t, "a resync check", func() bool { return testutil.ToFloat64(h.metrics.Checked) > checks })
	events := h.events(t)
	if h.tables.applied() != 1 || len(events) != 1 || events[0].InvolvedObject.Name != "web-2" {
		t.Errorf("another node's pod was repaired: %d applies, events %+v; want 1, for web-2", h.tables.applied(), events)
	}
}
