package nodetaint

import (
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/testsupport/apiservertest"
)

// agentNamespace and agentAccount are the node agent's service account as
// deploy/plexus-node ships it (the admission policy names it).
const (
	agentNamespace = "plexus-system"
	agentAccount   = "plexus-node"
)

// TestShippedNodePolicy runs against a real kube-apiserver with what
// deploy/plexus-node ships (service account, RBAC, admission policy) and
// tokens of the agent's service account as the kubelet gives its pod: the
// agent may remove the cni-not-ready taint from its own node with its
// real request (Remover), and nothing else -- not on another node, not a
// label, an annotation, another taint or any other field, and not with a
// token that is not bound to a pod on a node.
func TestShippedNodePolicy(t *testing.T) {
	a := apiservertest.Start(t)
	ctx := context.Background()
	admin := a.Client(t, apiservertest.AdminToken)
	a.Namespace(t, agentNamespace)
	for _, f := range []string{"serviceaccount.yaml", "rbac.yaml", "node-policy.yaml"} {
		a.Apply(t, "plexus-node/"+f)
	}
	other := corev1.Taint{Key: "example.com/other", Effect: corev1.TaintEffectNoExecute}
	newNode := func(name string) *corev1.Node {
		t.Helper()
		n, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"zone": "a"}},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{{Key: Key, Effect: corev1.TaintEffectNoSchedule}, other}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	own, foreign := newNode("node-a"), newNode("node-b")

	// The agent's pod on node-a, and its token as the kubelet requests it
	// (bound to the pod, so it names the pod's node).
	pod, err := admin.CoreV1().Pods(agentNamespace).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "plexus-node-x7k2p"},
		Spec: corev1.PodSpec{
			ServiceAccountName: agentAccount, NodeName: own.Name,
			Containers: []corev1.Container{{Name: "plexus-node", Image: "plexus.dev/plexus-node:dev"}},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agent := a.Client(t, token(t, admin, &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}))
	unbound := a.Client(t, token(t, admin, nil))

	apiservertest.WaitEnforced(t, "plexus-node", func(ctx context.Context) error {
		_, err := agent.CoreV1().Nodes().Patch(ctx, foreign.Name, types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"zone":"z"}}}`), metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	})

	refused := func(t *testing.T, err error, want string) {
		t.Helper()
		t.Logf("refused: %v", err)
		if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v; want Forbidden with %q", err, want)
		}
	}
	patch := func(c kubernetes.Interface, node, body string) error {
		_, err := c.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(body), metav1.PatchOptions{})
		return err
	}
	// taints is a patch setting own's taints to those keep accepts, and
	// extra; labels, if not nil, are set too.
	taints := func(keep func(corev1.Taint) bool, labels map[string]string, extra ...corev1.Taint) string {
		var list []corev1.Taint
		for _, tt := range own.Spec.Taints {
			if keep(tt) {
				list = append(list, tt)
			}
		}
		p := map[string]any{"spec": map[string]any{"taints": append(list, extra...)}}
		if labels != nil {
			p["metadata"] = map[string]any{"labels": labels}
		}
		b, err := json.Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	all := func(corev1.Taint) bool { return true }
	notOurs := func(tt corev1.Taint) bool { return tt.Key != Key }

	t.Run("another node", func(t *testing.T) {
		_, err := (&Remover{Client: agent, Node: foreign.Name}).Remove(ctx)
		refused(t, err, "may not update node node-b: only its own")
	})
	t.Run("a token not bound to a pod", func(t *testing.T) {
		_, err := (&Remover{Client: unbound, Node: own.Name}).Remove(ctx)
		refused(t, err, "names no node")
	})
	for _, tc := range []struct{ name, patch, want string }{
		{"a label", `{"metadata":{"labels":{"zone":"b"}}}`, "metadata.labels"},
		{"an annotation", `{"metadata":{"annotations":{"example.com/x":"y"}}}`, "metadata.annotations"},
		{"a finalizer", `{"metadata":{"finalizers":["example.com/keep"]}}`, "metadata.finalizers"},
		{"unschedulable", `{"spec":{"unschedulable":true}}`, "spec.unschedulable"},
		{"the pod CIDR", `{"spec":{"podCIDR":"10.244.9.0/24","podCIDRs":["10.244.9.0/24"]}}`, "spec.podCIDR"},
		{"a taint added", taints(all, nil, corev1.Taint{Key: "example.com/evil", Effect: corev1.TaintEffectNoExecute}), "keeping every other taint"},
		{"ours removed, one added", taints(notOurs, nil, corev1.Taint{Key: "example.com/evil", Effect: corev1.TaintEffectNoExecute}), "keeping every other taint"},
		{"another taint removed", taints(func(tt corev1.Taint) bool { return tt.Key != other.Key }, nil), "keeping every other taint"},
		{"another taint changed", taints(notOurs, nil, corev1.Taint{Key: Key, Effect: corev1.TaintEffectNoExecute}), "keeping every other taint"},
		{"no taint removed", taints(all, nil), "keeping every other taint"},
		{"ours removed and a label", taints(notOurs, map[string]string{"zone": "b"}), "metadata.labels"},
	} {
		t.Run("own node: "+tc.name, func(t *testing.T) {
			refused(t, patch(agent, own.Name, tc.patch), tc.want)
		})
	}
	t.Run("status", func(t *testing.T) {
		_, err := agent.CoreV1().Nodes().Patch(ctx, own.Name, types.MergePatchType, []byte(`{"status":{"phase":"Running"}}`), metav1.PatchOptions{}, "status")
		if !apierrors.IsForbidden(err) {
			t.Errorf("status patch: err = %v, want Forbidden", err)
		}
	})
	for _, n := range []*corev1.Node{own, foreign} {
		got, err := admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.ResourceVersion != n.ResourceVersion {
			t.Fatalf("node %s was changed by refused requests:\n%+v\nwas %+v", n.Name, got, n)
		}
	}

	t.Run("its own taint, as the agent removes it", func(t *testing.T) {
		r := &Remover{Client: agent, Node: own.Name}
		if removed, err := r.Remove(ctx); err != nil || !removed {
			t.Fatalf("Remove = %v, %v", removed, err)
		}
		got, err := admin.CoreV1().Nodes().Get(ctx, own.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var rest []corev1.Taint
		for _, tt := range got.Spec.Taints {
			if tt.Key != other.Key {
				rest = append(rest, tt) // admission's own, e.g. node.kubernetes.io/not-ready
			}
		}
		if !reflect.DeepEqual(got.Labels, own.Labels) || len(got.Spec.Taints) != len(own.Spec.Taints)-1 {
			t.Errorf("after Remove: labels %v, taints %+v; want labels %v and the taints but ours", got.Labels, got.Spec.Taints, own.Labels)
		}
		for _, tt := range rest {
			if tt.Key == Key {
				t.Errorf("the taint is still there: %+v", got.Spec.Taints)
			}
		}
		if removed, err := r.Remove(ctx); err != nil || removed {
			t.Errorf("second Remove = %v, %v; want nothing to do", removed, err)
		}
	})

	// A node service (plexus-node --kubeconfig) with a token bound to its
	// Node rather than to a pod.
	t.Run("its own taint, with a token bound to the node", func(t *testing.T) {
		n, err := admin.CoreV1().Nodes().Get(ctx, own.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: Key, Effect: corev1.TaintEffectNoSchedule})
		if _, err := admin.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		nodeBound := a.Client(t, token(t, admin, &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: own.Name, UID: own.UID}))
		if removed, err := (&Remover{Client: nodeBound, Node: own.Name}).Remove(ctx); err != nil || !removed {
			t.Fatalf("Remove = %v, %v", removed, err)
		}
		_, err = (&Remover{Client: nodeBound, Node: foreign.Name}).Remove(ctx)
		refused(t, err, "only its own")
	})

	t.Run("the policy type-checks against the Node schema", func(t *testing.T) {
		for _, w := range a.PolicyWarnings(t, "plexus-node") {
			t.Errorf("%s: %s", w.FieldRef, w.Warning)
		}
	})

	t.Run("others are not limited", func(t *testing.T) {
		if err := patch(admin, foreign.Name, `{"metadata":{"labels":{"zone":"b"}}}`); err != nil {
			t.Errorf("admin labelling a node: %v", err)
		}
	})
}

// token requests a token of the agent's service account, bound to ref
// (nil: to nothing, as an admin could mint one).
func token(t *testing.T, admin kubernetes.Interface, ref *authenticationv1.BoundObjectReference) string {
	t.Helper()
	exp := int64(3600)
	tr, err := admin.CoreV1().ServiceAccounts(agentNamespace).CreateToken(context.Background(), agentAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: ref, ExpirationSeconds: &exp},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}
