package nodetaint

import (
	"context"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
)

// TestRemoveWithShippedRBAC runs against a real kube-apiserver as a user
// bound only to the ClusterRole shipped in deploy/plexus-node/rbac.yaml.
func TestRemoveWithShippedRBAC(t *testing.T) {
	a := apiservertest.Start(t)
	ctx := context.Background()
	admin := a.Client(t, apiservertest.AdminToken)
	a.BindShippedRole(t)
	other := corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoExecute}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "plexus-test-node"},
		Spec: corev1.NodeSpec{Taints: []corev1.Taint{
			{Key: Key, Effect: corev1.TaintEffectNoSchedule},
			other,
		}},
	}
	created, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Admission adds taints of its own (node.kubernetes.io/not-ready);
	// every taint but ours must survive, in order.
	var want []corev1.Taint
	for _, tt := range created.Spec.Taints {
		if tt.Key != Key {
			want = append(want, tt)
		}
	}
	if len(want) != len(created.Spec.Taints)-1 || !reflect.DeepEqual(want[0], other) {
		t.Fatalf("created node taints %+v", created.Spec.Taints)
	}

	// Someone without the role is refused with a hint.
	nobody := &Remover{Client: a.Client(t, apiservertest.NobodyToken), Node: node.Name}
	if _, err := nobody.Remove(ctx); err == nil || !strings.Contains(err.Error(), "get and patch on nodes") {
		t.Fatalf("unbound user: err = %v", err)
	}

	r := &Remover{Client: a.Client(t, apiservertest.AgentToken), Node: node.Name}
	removed, err := r.Remove(ctx)
	if err != nil || !removed {
		t.Fatalf("Remove = %v, %v", removed, err)
	}
	got, err := admin.CoreV1().Nodes().Get(ctx, node.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Spec.Taints, want) {
		t.Fatalf("taints after Remove = %+v, want %+v", got.Spec.Taints, want)
	}
	if removed, err := r.Remove(ctx); err != nil || removed {
		t.Fatalf("second Remove = %v, %v; want nothing to do", removed, err)
	}
}
