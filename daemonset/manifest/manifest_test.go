package manifest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/daemonset/pluginentry"
	"github.com/plexus-mesh/plexus/daemonset/repair"
)

const (
	dir        = "../../deploy/plexus-node"
	cleanupDir = "../../deploy/plexus-node-cleanup"
)

// decode reads one YAML file of deploy/plexus-node into the typed objects,
// rejecting unknown fields (a typo in a manifest fails here, not on a
// cluster).
func decode(t *testing.T, file string, into ...any) {
	t.Helper()
	decodeFile(t, filepath.Join(dir, file), into...)
}

func decodeFrom(t *testing.T, dir, file string, into ...any) {
	t.Helper()
	decodeFile(t, filepath.Join(dir, file), into...)
}

func decodeFile(t *testing.T, file string, into ...any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(b), "\n---\n")
	if len(docs) != len(into) {
		t.Fatalf("%s holds %d documents, want %d", file, len(docs), len(into))
	}
	for i, d := range docs {
		if err := yaml.UnmarshalStrict([]byte(d), into[i]); err != nil {
			t.Fatalf("%s document %d: %v", file, i, err)
		}
	}
}

func args(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, a := range c.Args {
		if k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "="); ok {
			m[k] = v
		}
	}
	return m
}

func TestDaemonSet(t *testing.T) {
	var ds appsv1.DaemonSet
	decode(t, "daemonset.yaml", &ds)
	spec := ds.Spec.Template.Spec
	if spec.PriorityClassName != "system-node-critical" {
		t.Errorf("priorityClassName = %q", spec.PriorityClassName)
	}
	tolerateAll := false
	for _, tol := range spec.Tolerations {
		if tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == "" {
			tolerateAll = true
		}
	}
	if !tolerateAll {
		t.Errorf("tolerations %+v do not tolerate every taint", spec.Tolerations)
	}
	if len(spec.Containers) != 1 || len(spec.InitContainers) != 0 {
		t.Fatalf("want one container, got %d (+%d init)", len(spec.Containers), len(spec.InitContainers))
	}
	c := spec.Containers[0]
	sc := c.SecurityContext
	// The repair needs setns (SYS_ADMIN) and iptables (NET_ADMIN, NET_RAW);
	// nothing else.
	repairCaps := []corev1.Capability{"SYS_ADMIN", "NET_ADMIN", "NET_RAW"}
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil ||
		!reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !reflect.DeepEqual(sc.Capabilities.Add, repairCaps) {
		t.Errorf("securityContext not minimal: %+v", sc)
	}
	if spec.HostPID || spec.HostIPC {
		t.Error("hostPID/hostIPC set")
	}

	// Every host dir flag has a hostPath volume at that path, mounted at
	// --root + path: the three dirs the agent writes writable, the netns
	// dir read-only with HostToContainer propagation (namespaces of pods
	// started later must appear); and the host's xtables lock at the path
	// iptables uses. Nothing else of the host is mounted.
	a := args(c)
	root := a["root"]
	hostPaths := map[string]*corev1.HostPathVolumeSource{} // volume name -> host path
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath
		}
	}
	mounts := map[string]corev1.VolumeMount{} // host path -> mount
	for _, m := range c.VolumeMounts {
		if hp, ok := hostPaths[m.Name]; ok {
			mounts[hp.Path] = m
		}
	}
	for _, flag := range []string{"cni-bin-dir", "cni-conf-dir", "state-dir", "netns-dir"} {
		p := a[flag]
		if p == "" {
			t.Errorf("--%s not set", flag)
			continue
		}
		m := mounts[p]
		if m.MountPath != filepath.Join(root, p) {
			t.Errorf("--%s=%s: host path mounted at %q, want %q", flag, p, m.MountPath, filepath.Join(root, p))
		}
		readOnly, propagation := flag == "netns-dir", corev1.MountPropagationMode("")
		if flag == "netns-dir" {
			propagation = corev1.MountPropagationHostToContainer
		}
		if m.ReadOnly != readOnly || (m.MountPropagation == nil) != (propagation == "") ||
			(m.MountPropagation != nil && *m.MountPropagation != propagation) {
			t.Errorf("--%s mount %s: readOnly=%v propagation=%v, want readOnly=%v propagation=%q", flag, m.Name, m.ReadOnly, m.MountPropagation, readOnly, propagation)
		}
	}
	const lock = "/run/xtables.lock"
	if m, ok := mounts[lock]; !ok || m.MountPath != lock || m.ReadOnly || *hostPaths[m.Name].Type != corev1.HostPathFileOrCreate {
		t.Errorf("the host's %s is not mounted writable at %s (FileOrCreate): %+v", lock, lock, m)
	}
	if len(mounts) != 5 {
		t.Errorf("host paths mounted: %v, want exactly the four dirs and the xtables lock", mounts)
	}
	if err := repair.Mode(a["repair"]).Validate(); err != nil {
		t.Errorf("--repair: %v", err)
	}

	// The plugin config file is the ConfigMap's key.
	var cm corev1.ConfigMap
	decode(t, "configmap.yaml", &cm)
	cfgPath := a["plugin-config"]
	found := false
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == cm.Name {
				_, ok := cm.Data[strings.TrimPrefix(cfgPath, m.MountPath+"/")]
				found = found || (strings.HasPrefix(cfgPath, m.MountPath+"/") && ok)
			}
		}
	}
	if !found {
		t.Errorf("--plugin-config=%s is not a key of ConfigMap %s", cfgPath, cm.Name)
	}
	if _, err := pluginentry.Build([]byte(cm.Data["plugin.json"]), "/var/lib/plexus/plexus-cni.kubeconfig",
		pluginentry.Sockets{Report: "/var/lib/plexus/reports.sock", Pods: "/var/lib/plexus/pods.sock"}); err != nil {
		t.Errorf("ConfigMap plugin.json rejected by the plugin: %v", err)
	}

	// Readiness probe hits the agent's /ready on its --listen port.
	_, port, _ := strings.Cut(a["listen"], ":")
	p := c.ReadinessProbe
	if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/ready" || p.HTTPGet.Port.String() != port {
		t.Errorf("readinessProbe %+v does not match --listen=%s", p, a["listen"])
	}

	nodeName := false
	for _, e := range c.Env {
		if e.Name == "NODE_NAME" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName" {
			nodeName = true
		}
	}
	if !nodeName {
		t.Error("NODE_NAME is not set from spec.nodeName; the taint would never be removed")
	}

	var sa corev1.ServiceAccount
	decode(t, "serviceaccount.yaml", &sa)
	if spec.ServiceAccountName != sa.Name || ds.Namespace != sa.Namespace {
		t.Errorf("DaemonSet runs as %s/%s, ServiceAccount is %s/%s", ds.Namespace, spec.ServiceAccountName, sa.Namespace, sa.Name)
	}
}

func TestRBACLeastPrivilege(t *testing.T) {
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	var own rbacv1.Role
	var ownBinding rbacv1.RoleBinding
	decode(t, "rbac.yaml", &role, &binding, &own, &ownBinding)
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get", "list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("ClusterRole rules = %+v, want only get+list+watch pods, get+patch nodes, create events", role.Rules)
	}
	bindsAgent(t, role, binding)

	// In its own namespace, the agent may read its own DaemonSet, nothing else.
	var ds appsv1.DaemonSet
	decode(t, "daemonset.yaml", &ds)
	wantOwn := []rbacv1.PolicyRule{{APIGroups: []string{"apps"}, Resources: []string{"daemonsets"}, ResourceNames: []string{ds.Name}, Verbs: []string{"get"}}}
	if !reflect.DeepEqual(own.Rules, wantOwn) || own.Namespace != ds.Namespace {
		t.Errorf("Role %s/%s rules = %+v, want only get of DaemonSet %s/%s", own.Namespace, own.Name, own.Rules, ds.Namespace, ds.Name)
	}
	var sa corev1.ServiceAccount
	decode(t, "serviceaccount.yaml", &sa)
	if ownBinding.Namespace != ds.Namespace || ownBinding.RoleRef.Kind != "Role" || ownBinding.RoleRef.Name != own.Name ||
		len(ownBinding.Subjects) != 1 || ownBinding.Subjects[0].Name != sa.Name || ownBinding.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("RoleBinding %+v does not bind Role %s to %s/%s", ownBinding, own.Name, sa.Namespace, sa.Name)
	}
}

// TestRepairDeleteRBAC: the optional role for --repair=delete grants
// delete on pods and nothing else, to the agent's service account.
func TestRepairDeleteRBAC(t *testing.T) {
	var role rbacv1.ClusterRole
	var binding rbacv1.ClusterRoleBinding
	decodeFrom(t, "../../deploy/plexus-node-repair-delete", "rbac.yaml", &role, &binding)
	want := []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"delete"}}}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("ClusterRole rules = %+v, want only delete pods", role.Rules)
	}
	bindsAgent(t, role, binding)
}

// bindsAgent checks binding gives role to the agent's service account.
func bindsAgent(t *testing.T, role rbacv1.ClusterRole, binding rbacv1.ClusterRoleBinding) {
	t.Helper()
	var sa corev1.ServiceAccount
	decode(t, "serviceaccount.yaml", &sa)
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Name != sa.Name || binding.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("binding %+v does not bind %s to %s/%s", binding, role.Name, sa.Namespace, sa.Name)
	}
}

// TestCleanupDaemonSet: the cleanup DaemonSet reaches exactly the agent's
// host dirs, with the agent's image and flags, on every node, and cannot
// be taken for the agent.
func TestCleanupDaemonSet(t *testing.T) {
	var agent, cleanup appsv1.DaemonSet
	decode(t, "daemonset.yaml", &agent)
	decodeFile(t, filepath.Join(cleanupDir, "daemonset.yaml"), &cleanup)
	as, cs := agent.Spec.Template.Spec, cleanup.Spec.Template.Spec
	if cleanup.Namespace != agent.Namespace || !strings.HasPrefix(cleanup.Name, agent.Name+"-") {
		t.Errorf("cleanup is %s/%s; want %s/%s-* (the plugin skips pods named %s-*)", cleanup.Namespace, cleanup.Name, agent.Namespace, agent.Name, agent.Name)
	}
	for k, v := range agent.Spec.Selector.MatchLabels {
		if cleanup.Spec.Template.Labels[k] == v {
			t.Errorf("cleanup pods carry the agent's selector label %s=%s", k, v)
		}
	}
	if !reflect.DeepEqual(cs.Tolerations, as.Tolerations) || cs.PriorityClassName != as.PriorityClassName || !cs.HostNetwork {
		t.Errorf("cleanup tolerations %+v, priority %q, hostNetwork %v; want the agent's and host network", cs.Tolerations, cs.PriorityClassName, cs.HostNetwork)
	}
	if len(cs.InitContainers) != 1 || len(cs.Containers) != 1 {
		t.Fatalf("want one init container and one container, got %d and %d", len(cs.InitContainers), len(cs.Containers))
	}
	ac, un, wait := as.Containers[0], cs.InitContainers[0], cs.Containers[0]
	if un.Args[0] != "uninstall" || !reflect.DeepEqual(wait.Args, []string{"wait"}) {
		t.Errorf("init args %v, container args %v; want uninstall, then wait", un.Args, wait.Args)
	}
	if un.Image != ac.Image || wait.Image != ac.Image {
		t.Errorf("images %s, %s; want the agent's %s", un.Image, wait.Image, ac.Image)
	}
	want, got := args(ac), args(un)
	for _, flag := range []string{"root", "cni-bin-dir", "cni-conf-dir", "state-dir"} {
		if got[flag] != want[flag] {
			t.Errorf("uninstall --%s=%q, agent --%s=%q", flag, got[flag], flag, want[flag])
		}
	}
	if len(got) != 4 {
		t.Errorf("uninstall flags %v, want only the four dir flags", un.Args)
	}
	// The agent's context without the capabilities only the repair needs.
	wantSC := ac.SecurityContext.DeepCopy()
	wantSC.Capabilities.Add = nil
	gotSC := un.SecurityContext.DeepCopy()
	if gotSC != nil && gotSC.Capabilities != nil && len(gotSC.Capabilities.Add) == 0 {
		gotSC.Capabilities.Add = nil
	}
	if !reflect.DeepEqual(gotSC, wantSC) {
		t.Errorf("uninstall securityContext %+v, want the agent's without added capabilities %+v", un.SecurityContext, wantSC)
	}
	if len(wait.VolumeMounts) != 0 || wait.SecurityContext == nil || wait.SecurityContext.RunAsNonRoot == nil || !*wait.SecurityContext.RunAsNonRoot {
		t.Errorf("the waiting container needs no host dir and no root: %+v", wait)
	}
	// The same host paths, mounted at the same places: the dirs uninstall
	// writes (the repair's netns dir and xtables lock it does not need).
	uninstallDirs := map[string]bool{"cni-bin": true, "cni-conf": true, "state": true}
	hostVols := map[string]corev1.Volume{}
	for _, v := range as.Volumes {
		if v.HostPath != nil && uninstallDirs[v.Name] {
			hostVols[v.Name] = v
		}
	}
	if len(hostVols) != len(uninstallDirs) {
		t.Errorf("the agent mounts %d of the host dirs uninstall needs, want %d", len(hostVols), len(uninstallDirs))
	}
	n := 0
	for _, v := range cs.Volumes {
		if !reflect.DeepEqual(v, hostVols[v.Name]) {
			t.Errorf("cleanup volume %+v, agent's %+v", v, hostVols[v.Name])
		}
		n++
	}
	if n != len(hostVols) {
		t.Errorf("cleanup has %d volumes, the agent %d host dirs", n, len(hostVols))
	}
	agentMounts := map[string]string{}
	for _, m := range ac.VolumeMounts {
		agentMounts[m.Name] = m.MountPath
	}
	for _, m := range un.VolumeMounts {
		if agentMounts[m.Name] != m.MountPath || m.ReadOnly {
			t.Errorf("uninstall mounts %s at %s (read-only %v), the agent at %s", m.Name, m.MountPath, m.ReadOnly, agentMounts[m.Name])
		}
	}
	if len(un.VolumeMounts) != len(hostVols) {
		t.Errorf("uninstall mounts %d host dirs, want %d", len(un.VolumeMounts), len(hostVols))
	}
	if cs.AutomountServiceAccountToken == nil || *cs.AutomountServiceAccountToken {
		t.Error("the cleanup pods get an API token they do not need")
	}
}
