package uninstall

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/control/cli/install"
	"github.com/plexus-mesh/plexus/deploy"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
	"github.com/plexus-mesh/plexus/testsupport/goldentest"
)

var renderer = install.Renderer{Manifests: deploy.Manifests}

// cluster is one fake cluster seen through a typed and a dynamic client,
// recording every call of both in order.
type cluster struct {
	t      *testing.T
	client *fake.Clientset
	dyn    *dynamicfake.FakeDynamicClient

	mu    sync.Mutex
	calls []string // "verb resource name"

	// agentPodsStay keeps the agent's pods when its DaemonSet is deleted
	// (a node that never confirms the kill).
	agentPodsStay bool
	// controller, if set, plays the DaemonSet controller for the cleanup
	// DaemonSet once it is created.
	controller func(ds *appsv1.DaemonSet)
}

// newCluster holds nodes and, unless agent is nil, a default install
// (without --ha) whose node agent DaemonSet is agent, with a pod on
// every node.
func newCluster(t *testing.T, nodes []string, agent *appsv1.DaemonSet) *cluster {
	t.Helper()
	var typed []runtime.Object
	for _, n := range nodes {
		typed = append(typed, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}})
	}
	var objs []runtime.Object
	if agent != nil {
		typed = append(typed, agent, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: install.Namespace}})
		for _, n := range nodes {
			typed = append(typed, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
				Name: "plexus-node-" + n, Namespace: install.Namespace, Labels: map[string]string{"app.kubernetes.io/name": "plexus-node"},
			}, Spec: corev1.PodSpec{NodeName: n}})
		}
		refs, err := renderer.Inventory(install.DefaultConfig())
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range refs {
			objs = append(objs, stub(r))
		}
	}
	c := &cluster{t: t, client: fake.NewClientset(typed...), dyn: dynamicfake.NewSimpleDynamicClient(runtime.NewScheme(), objs...)}
	c.client.PrependReactor("*", "*", c.record)
	c.dyn.PrependReactor("*", "*", c.record)
	c.client.PrependReactor("delete", "daemonsets", c.deleteDaemonSet)
	c.client.PrependReactor("create", "daemonsets", c.createDaemonSet)
	c.client.PrependReactor("create", "namespaces", c.createNamespace)
	return c
}

func stub(r install.Ref) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(r.APIVersion)
	u.SetKind(r.Kind)
	u.SetName(r.Name)
	u.SetNamespace(r.Namespace)
	return u
}

func (c *cluster) record(a k8stesting.Action) (bool, runtime.Object, error) {
	name := ""
	switch a := a.(type) {
	case k8stesting.GetAction:
		name = a.GetName()
	case k8stesting.DeleteAction:
		name = a.GetName()
	case k8stesting.CreateAction:
		if m, err := metaOf(a.GetObject()); err == nil {
			name = m.GetName()
		}
	case k8stesting.UpdateAction:
		if m, err := metaOf(a.GetObject()); err == nil {
			name = m.GetName()
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	res := a.GetResource().Resource
	if sub := a.GetSubresource(); sub != "" {
		res += "/" + sub
	}
	c.calls = append(c.calls, strings.TrimSpace(a.GetVerb()+" "+res+" "+name))
	return false, nil, nil
}

func metaOf(o runtime.Object) (metav1.Object, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no metadata", o)
	}
	return m, nil
}

// deleteDaemonSet plays the garbage collector: the DaemonSet's pods go
// with it, and the dynamic view loses it too.
func (c *cluster) deleteDaemonSet(a k8stesting.Action) (bool, runtime.Object, error) {
	name := a.(k8stesting.DeleteAction).GetName()
	if name == AgentDaemonSet && !c.agentPodsStay {
		pods, _ := c.client.Tracker().List(corev1.SchemeGroupVersion.WithResource("pods"), corev1.SchemeGroupVersion.WithKind("Pod"), install.Namespace)
		for _, p := range pods.(*corev1.PodList).Items {
			c.client.Tracker().Delete(corev1.SchemeGroupVersion.WithResource("pods"), install.Namespace, p.Name)
		}
	}
	c.dyn.Tracker().Delete(appsv1.SchemeGroupVersion.WithResource("daemonsets"), install.Namespace, name)
	return false, nil, nil
}

// createDaemonSet makes a created DaemonSet visible to the dynamic client
// and hands the cleanup DaemonSet to the test's controller.
func (c *cluster) createDaemonSet(a k8stesting.Action) (bool, runtime.Object, error) {
	ds := a.(k8stesting.CreateAction).GetObject().(*appsv1.DaemonSet)
	ds.Generation = 1 // as the API server sets it; the status lags until the controller looks
	c.dyn.Tracker().Add(stub(install.Ref{APIVersion: "apps/v1", Kind: "DaemonSet", Namespace: ds.Namespace, Name: ds.Name}))
	if ds.Name == CleanupDaemonSet && c.controller != nil {
		go c.controller(ds.DeepCopy())
	}
	return false, nil, nil
}

// createNamespace makes a created namespace visible to the dynamic client.
func (c *cluster) createNamespace(a k8stesting.Action) (bool, runtime.Object, error) {
	ns := a.(k8stesting.CreateAction).GetObject().(*corev1.Namespace)
	c.dyn.Tracker().Add(stub(install.Ref{APIVersion: "v1", Kind: "Namespace", Name: ns.Name}))
	return false, nil, nil
}

// setStatus is what the DaemonSet controller would report.
func (c *cluster) setStatus(ready, desired int32) {
	ds, err := c.client.AppsV1().DaemonSets(install.Namespace).Get(context.Background(), CleanupDaemonSet, metav1.GetOptions{})
	if err != nil {
		c.t.Error(err)
		return
	}
	ds.Status = appsv1.DaemonSetStatus{DesiredNumberScheduled: desired, NumberReady: ready, UpdatedNumberScheduled: desired, ObservedGeneration: ds.Generation}
	if _, err := c.client.AppsV1().DaemonSets(install.Namespace).UpdateStatus(context.Background(), ds, metav1.UpdateOptions{}); err != nil {
		c.t.Error(err)
	}
}

// count is how many calls so far were call.
func (c *cluster) count(call string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, s := range c.calls {
		if s == call {
			n++
		}
	}
	return n
}

func (c *cluster) log() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// index is the position of the first call, -1 if none.
func index(calls []string, call string) int { return slices.Index(calls, call) }

func (c *cluster) run(cfg Config) (string, string, error) {
	var out, progress bytes.Buffer
	u := Uninstaller{Client: c.client, Dynamic: c.dyn, Renderer: renderer, Progress: &progress, Poll: 5 * time.Millisecond}
	err := u.Run(context.Background(), cfg, &out)
	return out.String(), progress.String(), err
}

func defaultConfig() Config {
	return Config{Install: install.DefaultConfig(), Timeout: 5 * time.Second}
}

// agentDaemonSet is the node agent as deploy/ ships it, or customized.
func agentDaemonSet(t *testing.T, cfg install.Config) *appsv1.DaemonSet {
	t.Helper()
	var out bytes.Buffer
	r := renderer
	r.Generate = func(string, time.Time) (install.Identity, error) { return install.Identity{}, nil }
	r.Now = time.Now
	if err := r.Render(cfg, &out); err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(out.String(), "\n---\n") {
		if strings.Contains(doc, "kind: DaemonSet") {
			var ds appsv1.DaemonSet
			if err := yaml.UnmarshalStrict([]byte(doc), &ds); err != nil {
				t.Fatal(err)
			}
			return &ds
		}
	}
	t.Fatal("no DaemonSet rendered")
	return nil
}

func TestDeleteOrder(t *testing.T) {
	c := newCluster(t, []string{"n1", "n2"}, agentDaemonSet(t, install.DefaultConfig()))
	// The rollout goes on once the uninstall has looked at each step.
	c.controller = func(*appsv1.DaemonSet) {
		for _, ready := range []int32{0, 1} {
			c.setStatus(ready, 2)
			n := c.count("get daemonsets " + CleanupDaemonSet)
			if !eventually.Holds(5*time.Second, func() bool { return c.count("get daemonsets "+CleanupDaemonSet) > n }) {
				c.t.Errorf("the uninstall did not look at the cleanup DaemonSet with %d of 2 ready", ready)
			}
		}
		c.setStatus(2, 2)
	}
	cfg := defaultConfig()
	cfg.Delete = true
	out, progress, err := c.run(cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress)
	}
	if out != "" {
		t.Errorf("--delete printed manifests:\n%s", out)
	}
	calls := c.log()
	agentGone := index(calls, "delete daemonsets plexus-node")
	podsChecked := slices.IndexFunc(calls, func(s string) bool { return s == "list pods" })
	created := index(calls, "create daemonsets plexus-node-cleanup")
	firstDelete := slices.IndexFunc(calls[agentGone+1:], func(s string) bool { return strings.HasPrefix(s, "delete ") })
	webhook := index(calls, "delete mutatingwebhookconfigurations plexus-injector")
	injector := index(calls, "delete deployments plexus-injector")
	if agentGone < 0 || !(agentGone < podsChecked && podsChecked < created && created < webhook && webhook < injector) {
		t.Errorf("want: delete the agent, see its pods gone, create the cleanup, then the webhook, then the injector; calls:\n%s", strings.Join(calls, "\n"))
	}
	if first := calls[agentGone+1+firstDelete:][:2]; first[0] != "delete validatingwebhookconfigurations plexus-sp-validator" || first[1] != "delete mutatingwebhookconfigurations plexus-injector" {
		t.Errorf("first deletions after the nodes are %q, want the webhook configurations", first)
	}
	if index(calls, "delete validatingwebhookconfigurations plexus-sp-validator") > index(calls, "delete deployments plexus-sp-validator") {
		t.Error("the sp-validator went before its webhook configuration")
	}
	// Nothing is deleted before the cleanup DaemonSet was seen ready.
	lastGet := slices.IndexFunc(calls[created:], func(s string) bool { return s == "get daemonsets plexus-node-cleanup" })
	for i := created; i < created+lastGet; i++ {
		if strings.HasPrefix(calls[i], "delete ") {
			t.Errorf("%s before the cleanup was ready", calls[i])
		}
	}
	var deleted []string
	for _, s := range calls {
		if r, ok := strings.CutPrefix(s, "delete "); ok {
			deleted = append(deleted, r)
		}
	}
	if last := deleted[len(deleted)-1]; last != "namespaces plexus-system" {
		t.Errorf("last deletion is %q, want the namespace", last)
	}
	for _, want := range []string{"daemonsets plexus-node-cleanup", "customresourcedefinitions serviceprofiles.plexus.dev", "clusterroles plexus-node", "secrets plexus-identity-issuer"} {
		if !slices.Contains(deleted, want) {
			t.Errorf("%s not deleted; deleted: %v", want, deleted)
		}
	}
	for _, d := range deleted {
		if strings.HasPrefix(d, "poddisruptionbudgets") {
			t.Errorf("deleted %s, which this install does not have", d)
		}
	}
	for _, want := range []string{"deleting DaemonSet plexus-system/plexus-node", "removed from all 2 nodes", "deleted Namespace plexus-system"} {
		if !strings.Contains(progress, want) {
			t.Errorf("progress lacks %q:\n%s", want, progress)
		}
	}
}

func TestPrintGolden(t *testing.T) {
	c := newCluster(t, []string{"n1"}, agentDaemonSet(t, install.DefaultConfig()))
	c.controller = func(*appsv1.DaemonSet) { c.setStatus(1, 1) }
	out, progress, err := c.run(defaultConfig())
	if err != nil {
		t.Fatalf("%v\n%s", err, progress)
	}
	goldentest.Golden(t, "print.golden.yaml", []byte(out))
	for _, call := range c.log() {
		if strings.HasPrefix(call, "delete ") && call != "delete daemonsets plexus-node" {
			t.Errorf("print mode deleted more than the node agent: %s", call)
		}
	}
}

// TestCleanupAdoptsTheAgent: a k3s install whose agent was moved to other
// dirs and another image: the cleanup reaches exactly those, whatever the
// flags of plexusctl uninstall say.
func TestCleanupAdoptsTheAgent(t *testing.T) {
	k3s := install.DefaultConfig()
	k3s.CNIBinDir = "/var/lib/rancher/k3s/data/current/bin"
	k3s.CNIConfDir = "/var/lib/rancher/k3s/agent/etc/cni/net.d"
	k3s.ImageRegistry, k3s.Version = "registry.example.org/mesh", "v1.2.3"
	agent := agentDaemonSet(t, k3s)
	agent.Spec.Template.Spec.NodeSelector = map[string]string{"mesh": "yes"}
	c := newCluster(t, []string{"n1"}, agent)
	var created *appsv1.DaemonSet
	c.controller = func(ds *appsv1.DaemonSet) {
		created = ds
		c.setStatus(1, 1)
	}
	if _, progress, err := c.run(defaultConfig()); err != nil {
		t.Fatalf("%v\n%s", err, progress)
	}
	created.Generation, created.Status = 0, appsv1.DaemonSetStatus{} // the fake API server's part
	b, err := yaml.Marshal(created)
	if err != nil {
		t.Fatal(err)
	}
	goldentest.Golden(t, "cleanup-k3s.golden.yaml", b)
	if strings.Contains(string(b), "/opt/cni/bin") || strings.Contains(string(b), "plexus.dev/plexus-node") {
		t.Errorf("the cleanup kept a default the agent does not use:\n%s", b)
	}
}

func TestNodeThatNeverFinishesIsNamed(t *testing.T) {
	c := newCluster(t, []string{"n1", "n2", "n3"}, agentDaemonSet(t, install.DefaultConfig()))
	c.controller = func(*appsv1.DaemonSet) {
		ready := corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
		failing := corev1.PodStatus{Phase: corev1.PodPending, InitContainerStatuses: []corev1.ContainerStatus{{
			Name:  "uninstall",
			State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff"}},
			LastTerminationState: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 1,
				Message: "removing plexus-cni from the CNI config: open /host/etc/cni/net.d/10-flannel.conflist: permission denied\nusage: ..."}},
		}}}
		for node, status := range map[string]corev1.PodStatus{"n1": ready, "n2": failing} {
			_, err := c.client.CoreV1().Pods(install.Namespace).Create(context.Background(), &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: "plexus-node-cleanup-" + node, Namespace: install.Namespace,
					Labels: map[string]string{"app.kubernetes.io/name": CleanupDaemonSet}},
				Spec: corev1.PodSpec{NodeName: node}, Status: status,
			}, metav1.CreateOptions{})
			if err != nil {
				c.t.Error(err)
			}
		}
		c.setStatus(1, 3)
	}
	cfg := defaultConfig()
	cfg.Delete = true
	cfg.Timeout = 300 * time.Millisecond
	out, progress, err := c.run(cfg)
	if err == nil {
		t.Fatalf("uninstall succeeded with a node that never finished\n%s", progress)
	}
	msg := err.Error()
	for _, want := range []string{
		"within 300ms (1 of 3 cleanup pods ready)",
		"node n2: init container uninstall: CrashLoopBackOff: removing plexus-cni from the CNI config: open /host/etc/cni/net.d/10-flannel.conflist: permission denied\n",
		"node n3: no cleanup pod",
		"Nothing else was deleted",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "n1") {
		t.Errorf("error names the finished node n1:\n%s", msg)
	}
	if out != "" {
		t.Errorf("printed manifests after a failed cleanup:\n%s", out)
	}
	for _, call := range c.log() {
		if strings.HasPrefix(call, "delete ") && call != "delete daemonsets plexus-node" {
			t.Errorf("deleted after a failed cleanup: %s", call)
		}
	}
}

func TestAgentPodsThatStayAreNamed(t *testing.T) {
	c := newCluster(t, []string{"n1"}, agentDaemonSet(t, install.DefaultConfig()))
	c.agentPodsStay = true
	cfg := defaultConfig()
	cfg.Timeout = 200 * time.Millisecond
	_, _, err := c.run(cfg)
	if err == nil || !strings.Contains(err.Error(), "plexus-node-n1 (node n1)") || !strings.Contains(err.Error(), "nothing was removed") {
		t.Fatalf("err = %v, want one naming the agent pod that stayed", err)
	}
	if index(c.log(), "create daemonsets plexus-node-cleanup") >= 0 {
		t.Error("the cleanup ran while an agent pod was still there")
	}
}

func TestAgentAndNamespaceDeletedByHand(t *testing.T) {
	c := newCluster(t, []string{"n1"}, nil)
	var created *appsv1.DaemonSet
	c.controller = func(ds *appsv1.DaemonSet) {
		created = ds
		c.setStatus(1, 1)
	}
	cfg := defaultConfig()
	cfg.Install.CNIConfDir = "/etc/k8s/cni"
	out, progress, err := c.run(cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, progress)
	}
	if created == nil || !strings.Contains(strings.Join(created.Spec.Template.Spec.InitContainers[0].Args, " "), "--cni-conf-dir=/etc/k8s/cni") {
		t.Fatalf("without an agent the cleanup uses the flags; created %+v", created)
	}
	calls := c.log()
	if created := index(calls, "create namespaces plexus-system"); created < 0 || created > index(calls, "create daemonsets plexus-node-cleanup") {
		t.Errorf("the namespace deleted by hand was not created again before the cleanup:\n%s", strings.Join(calls, "\n"))
	}
	want := "apiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: plexus-node-cleanup\n  namespace: plexus-system\n" +
		"---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: plexus-system\n"
	if out != want {
		t.Errorf("printed %q, want the cleanup DaemonSet and the namespace", out)
	}

	// Run again: the cleanup DaemonSet of the first run is kept as it is.
	cfg.Install.CNIConfDir = "/somewhere/else"
	if _, progress, err = c.run(cfg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(progress, "left from an earlier uninstall") || slices.ContainsFunc(c.log(), func(s string) bool { return strings.HasPrefix(s, "update daemonsets ") }) {
		t.Errorf("the earlier cleanup DaemonSet was not kept:\n%s", progress)
	}
}

func TestNodeImageModeLeavesNodesAlone(t *testing.T) {
	c := newCluster(t, []string{"n1"}, agentDaemonSet(t, install.DefaultConfig()))
	cfg := defaultConfig()
	cfg.Install.NodeImageMode = true
	out, _, err := c.run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, call := range c.log() {
		if strings.Contains(call, "daemonsets") && !strings.HasPrefix(call, "get ") || strings.Contains(call, "pods") {
			t.Errorf("node-image mode touched the nodes: %s", call)
		}
	}
	if !strings.Contains(out, "name: plexus-injector") {
		t.Errorf("output:\n%s", out)
	}
}

func TestConfigValidate(t *testing.T) {
	cfg := Config{Install: install.DefaultConfig()}
	if err := cfg.Validate(); err != nil || cfg.Timeout != DefaultTimeout {
		t.Fatalf("%v, timeout %v", err, cfg.Timeout)
	}
	cfg.Timeout = -time.Second
	if err := cfg.Validate(); err == nil {
		t.Error("negative timeout accepted")
	}
	cfg = Config{Install: install.DefaultConfig()}
	cfg.Install.CNIBinDir = "bin"
	if err := cfg.Validate(); err == nil {
		t.Error("relative bin dir accepted")
	}
}

// TestEveryKindHasAResource: uninstall can look up and delete every kind
// install renders.
func TestEveryKindHasAResource(t *testing.T) {
	cfg := install.DefaultConfig()
	cfg.HA = true
	refs, err := renderer.Inventory(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range refs {
		if _, err := r.Resource(); err != nil {
			t.Error(err)
		}
	}
}

func TestNothingLeft(t *testing.T) {
	c := newCluster(t, []string{"n1"}, nil)
	cfg := defaultConfig()
	cfg.Install.NodeImageMode = true
	out, progress, err := c.run(cfg)
	if err != nil || out != "" || !strings.Contains(progress, "nothing else of Plexus is left") {
		t.Errorf("err %v, out %q, progress %q", err, out, progress)
	}
}
