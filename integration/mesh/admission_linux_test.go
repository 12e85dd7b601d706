package mesh

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/plexus-mesh/plexus/daemonset/nodetaint"
	"github.com/plexus-mesh/plexus/daemonset/plugininstall"
	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestAdmission installs Plexus as a user does (`plexusctl install`, so
// the node agent runs as its DaemonSet with its own credentials) and
// proves the two admission policies it ships on the real cluster:
//   - on a running meshed pod, `kubectl annotate` of a config.plexus.dev or
//     plexus.dev annotation (add, change, remove; also through the status
//     subresource) is refused with a message naming it and saying such
//     annotations are fixed at admission, while other annotations change
//     freely; the pod's proxy carries the settings it was admitted with;
//   - with the node agent's real credentials -- the token the agent copied
//     onto the host for plexus-cni, bound to the agent's pod and so to its
//     node -- removing the plexus.dev/cni-not-ready taint from its own node
//     is allowed, and patching another node, labelling or annotating its
//     own, or adding a taint is refused; a token of the same service
//     account that is not bound to a pod may not even remove the taint;
//     and the restarted agent removes the taint itself.
func TestAdmission(t *testing.T) {
	env := clustercni.Read(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root to read the node agent's credentials on the host")
	}
	c := clustertest.Connect(t)
	installAllKeepingCNI(t, c, env)

	t.Run("pod annotations are fixed at admission", func(t *testing.T) { podAnnotations(t, c) })
	t.Run("the node agent may only remove its own node's taint", func(t *testing.T) { agentOnNodes(t, c, env.NodeName) })
	t.Run("a tenant who may create namespaces may not create plexus-viz", func(t *testing.T) { reservedNamespaces(t, c) })
}

// reservedNamespaces: a user allowed to create namespaces (a self-service
// tenant) is refused plexus-viz, whose plexus-tap every proxy serves its
// tap API to, with a message saying why; other namespaces are theirs to
// create. (Identity's own refusal of an undeclared reserved namespace is
// TestRealAPIServer's, in control/identity.)
func reservedNamespaces(t *testing.T, c *clustertest.Cluster) {
	ctx := clustertest.Context(t, time.Minute)
	rbac := c.Client.RbacV1()
	cr := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "plexus-test-namespace-creator"},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"create"}}}}
	if _, err := rbac.ClusterRoles().Create(ctx, cr, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rbac.ClusterRoles().Delete(context.Background(), cr.Name, metav1.DeleteOptions{}) })
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: cr.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, Name: "tenant", APIGroup: rbacv1.GroupName}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: cr.Name}}
	if _, err := rbac.ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rbac.ClusterRoleBindings().Delete(context.Background(), crb.Name, metav1.DeleteOptions{}) })
	cfg := rest.CopyConfig(c.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "tenant"}
	tenant, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The API server's RBAC authorizer learns of the binding from its
	// watch: until then the refusal would be RBAC's, not the reservation's
	// (a CI run).
	clustertest.WaitFor(t, 30*time.Second, "RBAC to let the tenant create namespaces", func(ctx context.Context) (bool, error) {
		r, err := tenant.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{Verb: "create", Resource: "namespaces"}},
		}, metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, err
	})
	_, err = tenant.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "plexus-viz"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "reserved for a Plexus extension") {
		t.Errorf("a tenant creating plexus-viz: %v; want refused as reserved", err)
	}
	const own = "plexus-test-tenant-own"
	if _, err := tenant.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: own}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("a tenant creating its own namespace %s: %v", own, err)
	} else {
		t.Cleanup(func() { c.Client.CoreV1().Namespaces().Delete(context.Background(), own, metav1.DeleteOptions{}) })
	}
}

func podAnnotations(t *testing.T, c *clustertest.Cluster) {
	ns := c.Namespace(t, "admission", meshLabels)
	deploy(t, c, ns, "hello", 1, meshed, podSpec("hello", "serve", ":8080"))
	c.WaitDeploymentReady(t, ns, "hello", 3*time.Minute)
	pod := pods(t, c, ns, "hello")[0]
	// No redirect annotations: only what the injector always adds, the
	// tap port skipped inbound.
	if v, want := admittedEnv(&pod), `{"config.plexus.dev/skip-inbound-ports":"4190"}`; v != want {
		t.Errorf("the proxy's %s = %q, want %s (no redirect settings but the tap port)", podcontract.EnvAdmitted, v, want)
	}

	annotate := func(args ...string) (string, error) {
		return kubectl(t, c, append([]string{"-n", ns, "annotate", "pod", pod.Name}, args...)...)
	}
	for _, tc := range []struct{ name, key string }{
		{"add a config annotation", "config.plexus.dev/skip-inbound-ports=1-4142"},
		{"change plexus.dev/injected", "plexus.dev/injected=false"},
		{"remove plexus.dev/injected", "plexus.dev/injected-"},
		{"add plexus.dev/inject", "plexus.dev/inject=disabled"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			out, err := annotate("--overwrite", tc.key)
			key, _, _ := strings.Cut(strings.TrimSuffix(tc.key, "-"), "=")
			if err == nil || !strings.Contains(out, key) || !strings.Contains(out, "fixed at admission") {
				t.Errorf("kubectl annotate %s: %v\n%s\nwant a refusal naming %s and saying it is fixed at admission", tc.key, err, out, key)
			}
		})
	}
	t.Run("refused: through the status", func(t *testing.T) {
		_, err := c.Client.CoreV1().Pods(ns).Patch(clustertest.Context(t, time.Minute), pod.Name, types.MergePatchType,
			[]byte(`{"metadata":{"annotations":{"config.plexus.dev/skip-inbound-ports":"1-4142"}}}`), metav1.PatchOptions{}, "status")
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "config.plexus.dev/skip-inbound-ports") {
			t.Errorf("annotating through pods/status: %v; want Forbidden naming the annotation", err)
		}
	})
	t.Run("allowed: other annotations", func(t *testing.T) {
		for _, args := range [][]string{{"example.com/owner=team-a"}, {"--overwrite", "example.com/owner=team-b"}, {"example.com/owner-"}} {
			if out, err := annotate(args...); err != nil {
				t.Errorf("kubectl annotate %v: %v\n%s", args, err, out)
			}
		}
	})

	got, err := c.Client.CoreV1().Pods(ns).Get(clustertest.Context(t, time.Minute), pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range pod.Annotations {
		if strings.Contains(k, "plexus.dev/") && got.Annotations[k] != v {
			t.Errorf("annotation %s is %q after the refusals, was %q", k, got.Annotations[k], v)
		}
	}
	for k := range got.Annotations {
		if _, was := pod.Annotations[k]; !was && strings.Contains(k, "plexus.dev/") {
			t.Errorf("annotation %s was added despite the refusals", k)
		}
	}
}

// admittedEnv is the value of the proxy's PLEXUS_REDIRECT_ANNOTATIONS.
func admittedEnv(p *corev1.Pod) string {
	for _, ctr := range append(p.Spec.InitContainers, p.Spec.Containers...) {
		if ctr.Name != "plexus-proxy" {
			continue
		}
		for _, e := range ctr.Env {
			if e.Name == podcontract.EnvAdmitted {
				return e.Value
			}
		}
	}
	return "(unset)"
}

func agentOnNodes(t *testing.T, c *clustertest.Cluster, own string) {
	ctx := clustertest.Context(t, 5*time.Minute)
	// The agent on node 1 (own), whose host files the test reads.
	agentPods, err := c.Client.CoreV1().Pods(controlNamespace).List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/name=plexus-node", FieldSelector: "spec.nodeName=" + own})
	if err != nil || len(agentPods.Items) != 1 {
		t.Fatalf("the node agent's pods on %s: %v (%d pods, want 1)", own, err, len(agentPods.Items))
	}
	agentPod := agentPods.Items[0]
	// The agent's real credentials: the token it copied onto the host for
	// plexus-cni, through the kubeconfig it wrote beside it.
	agent := hostAgentClient(t)
	unbound := unboundClient(t, c)

	refused := func(t *testing.T, err error, want string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("err = %v; want Forbidden with %q", err, want)
		}
	}
	// patch sends a merge patch of node; dryRun: admitted or refused as
	// any patch, but never written (were the policy missing, a refused
	// case would otherwise taint the cluster's one node).
	patch := func(client kubernetes.Interface, node string, body any, dryRun bool) error {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		var opts metav1.PatchOptions
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		_, err = client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, b, opts)
		return err
	}
	ourTaint := corev1.Taint{Key: nodetaint.Key, Effect: corev1.TaintEffectNoSchedule}

	t.Run("refused: another node", func(t *testing.T) {
		// A Node object with no kubelet behind it, deleted at once (the
		// DaemonSet may give it an agent pod that never runs; the pod
		// garbage collector removes it with the node).
		other, err := c.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{
			ObjectMeta: metav1.ObjectMeta{GenerateName: "plexus-admission-other-"},
			Spec:       corev1.NodeSpec{Taints: []corev1.Taint{ourTaint}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Client.CoreV1().Nodes().Delete(context.Background(), other.Name, metav1.DeleteOptions{})
		_, err = (&nodetaint.Remover{Client: agent, Node: other.Name}).Remove(ctx)
		refused(t, err, "may not update node "+other.Name+": only its own")
		refused(t, patch(agent, other.Name, map[string]any{"metadata": map[string]any{"labels": map[string]string{"example.com/evil": "yes"}}}, true), "only its own")
	})
	for _, tc := range []struct {
		name string
		body func(*corev1.Node) any
		want string
	}{
		{"a label on its own node", func(*corev1.Node) any {
			return map[string]any{"metadata": map[string]any{"labels": map[string]string{"example.com/evil": "yes"}}}
		}, "metadata.labels"},
		{"an annotation on its own node", func(*corev1.Node) any {
			return map[string]any{"metadata": map[string]any{"annotations": map[string]string{"example.com/evil": "yes"}}}
		}, "metadata.annotations"},
		{"a taint on its own node", func(n *corev1.Node) any {
			taints := append(n.Spec.Taints, corev1.Taint{Key: "example.com/evil", Effect: corev1.TaintEffectNoExecute})
			return map[string]any{"spec": map[string]any{"taints": taints}}
		}, "keeping every other taint"},
		{"its own node unschedulable", func(*corev1.Node) any {
			return map[string]any{"spec": map[string]any{"unschedulable": true}}
		}, "spec.unschedulable"},
	} {
		t.Run("refused: "+tc.name, func(t *testing.T) {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, own, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			refused(t, patch(agent, own, tc.body(n), true), tc.want)
		})
	}

	// From here the node carries the taint (as a node registers with it);
	// whatever happens, it does not keep it.
	addTaint := func(t *testing.T) {
		t.Helper()
		n, err := c.Client.CoreV1().Nodes().Get(ctx, own, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := patch(c.Client, own, map[string]any{"spec": map[string]any{"taints": append(n.Spec.Taints, ourTaint)}}, false); err != nil {
			t.Fatalf("adding the taint as admin: %v", err)
		}
	}
	t.Cleanup(func() {
		if _, err := (&nodetaint.Remover{Client: c.Client, Node: own}).Remove(context.Background()); err != nil {
			t.Errorf("removing the taint as admin: %v", err)
		}
	})

	t.Run("refused: a token not bound to a pod", func(t *testing.T) {
		addTaint(t)
		_, err := (&nodetaint.Remover{Client: unbound, Node: own}).Remove(ctx)
		refused(t, err, "names no node")
	})
	t.Run("allowed: removing its own node's taint", func(t *testing.T) {
		before, err := c.Client.CoreV1().Nodes().Get(ctx, own, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		removed, err := (&nodetaint.Remover{Client: agent, Node: own}).Remove(ctx)
		if err != nil || !removed {
			t.Fatalf("Remove with the agent's credentials = %v, %v", removed, err)
		}
		after, err := c.Client.CoreV1().Nodes().Get(ctx, own, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, tt := range after.Spec.Taints {
			if tt.Key == nodetaint.Key {
				t.Errorf("the taint is still there: %+v", after.Spec.Taints)
			}
		}
		if len(after.Labels) != len(before.Labels) || len(after.Spec.Taints) != len(before.Spec.Taints)-1 {
			t.Errorf("labels %v -> %v, taints %+v -> %+v: want only our taint gone", before.Labels, after.Labels, before.Spec.Taints, after.Spec.Taints)
		}
	})
	// Last: the restart ends the old pod, and with it the token copied
	// from it, so the host's credentials are the new pod's afterwards.
	t.Run("allowed: the restarted agent removes the taint itself", func(t *testing.T) {
		addTaint(t)
		if err := c.Client.CoreV1().Pods(controlNamespace).Delete(ctx, agentPod.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		clustertest.WaitFor(t, 3*time.Minute, "the new node agent to remove the taint", func(ctx context.Context) (bool, error) {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, own, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			for _, tt := range n.Spec.Taints {
				if tt.Key == nodetaint.Key {
					return false, nil
				}
			}
			return true, nil
		})
	})
}

// hostAgentClient is a client with the credentials the node agent wrote
// onto the host for plexus-cni (kubeconfig and token in its state dir, as
// install renders the DaemonSet).
func hostAgentClient(t *testing.T) kubernetes.Interface {
	t.Helper()
	path := filepath.Join("/var/lib/plexus", plugininstall.KubeconfigFile)
	var cfg *rest.Config
	clustertest.WaitFor(t, time.Minute, "the node agent's credentials in "+path, func(context.Context) (bool, error) {
		var err error
		cfg, err = clientcmd.BuildConfigFromFlags("", path)
		return err == nil, err
	})
	cfg.Timeout = 30 * time.Second
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// unboundClient is a client with a token of the node agent's service
// account that the admin requested bound to nothing (so naming no node).
func unboundClient(t *testing.T, c *clustertest.Cluster) kubernetes.Interface {
	t.Helper()
	ctx := clustertest.Context(t, time.Minute)
	exp := int64(600)
	req := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}
	tr, err := c.Client.CoreV1().ServiceAccounts(controlNamespace).CreateToken(ctx, "plexus-node", req, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(c.Config)
	cfg.BearerToken = tr.Status.Token
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// kubectl runs the cluster's kubectl and returns its combined output and
// error, for commands expected to fail.
func kubectl(t *testing.T, c *clustertest.Cluster, args ...string) (string, error) {
	t.Helper()
	bin := os.Getenv(clustertest.EnvKubectl)
	if bin == "" {
		bin = "kubectl"
	}
	out, err := exec.CommandContext(clustertest.Context(t, time.Minute), bin, append([]string{"--kubeconfig", c.Kubeconfig}, args...)...).CombinedOutput()
	return string(out), err
}
