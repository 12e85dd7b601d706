package nodeevents

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
)

// TestRecordWithShippedRBAC records against a real kube-apiserver as a user
// bound only to the ClusterRole in deploy/plexus-node/rbac.yaml.
func TestRecordWithShippedRBAC(t *testing.T) {
	a := apiservertest.Start(t)
	ctx := context.Background()
	admin := a.Client(t, apiservertest.AdminToken)
	a.BindShippedRole(t)

	nobody := &Recorder{Client: a.Client(t, apiservertest.NobodyToken), Node: "n1"}
	if _, err := nobody.Record(ctx, corev1.EventTypeWarning, "X", "y"); err == nil {
		t.Fatal("unbound user could create events")
	}

	r := &Recorder{Client: a.Client(t, apiservertest.AgentToken), Node: "n1"}
	msg := "CNI config /etc/cni/net.d/10-flannel.conflist is invalid"
	for i, want := range []bool{true, false} {
		ok, err := r.Record(ctx, corev1.EventTypeWarning, "CNIConfigInvalid", msg)
		if err != nil || ok != want {
			t.Fatalf("Record #%d = %v, %v; want %v", i, ok, err, want)
		}
	}
	if ok, err := r.Record(ctx, corev1.EventTypeWarning, "CNIConfigFight", "fight"); err != nil || !ok {
		t.Fatalf("other reason: %v, %v", ok, err)
	}
	// What `kubectl describe node n1` selects.
	list, err := admin.CoreV1().Events("default").List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=n1,involvedObject.uid=n1",
	})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]int{}
	for _, e := range list.Items {
		reasons[e.Reason]++
		if e.Source.Component != Component || e.Type != corev1.EventTypeWarning {
			t.Errorf("event %+v", e)
		}
	}
	if reasons["CNIConfigInvalid"] != 1 || reasons["CNIConfigFight"] != 1 || len(list.Items) != 2 {
		t.Fatalf("events by reason %v, want one of each", reasons)
	}
}
