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
)

const dir = "../../deploy/plexus-node"

// decode reads one YAML file into the typed objects, rejecting unknown
// fields (a typo in a manifest fails here, not on a cluster).
func decode(t *testing.T, file string, into ...any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, file))
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
	if sc == nil || sc.Privileged == nil || *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.Capabilities == nil ||
		!reflect.DeepEqual(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) != 0 {
		t.Errorf("securityContext not minimal: %+v", sc)
	}
	if spec.HostPID || spec.HostIPC {
		t.Error("hostPID/hostIPC set")
	}

	// Every host dir flag has a hostPath volume at that path, mounted at
	// --root + path, writable; nothing else of the host is mounted.
	a := args(c)
	root := a["root"]
	hostPaths := map[string]string{} // volume name -> host path
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	mounted := map[string]string{} // host path -> mount path
	for _, m := range c.VolumeMounts {
		if p, ok := hostPaths[m.Name]; ok {
			if m.ReadOnly {
				t.Errorf("host mount %s is read-only", m.Name)
			}
			mounted[p] = m.MountPath
		}
	}
	for _, flag := range []string{"cni-bin-dir", "cni-conf-dir", "state-dir"} {
		p := a[flag]
		if p == "" {
			t.Errorf("--%s not set", flag)
			continue
		}
		if mounted[p] != filepath.Join(root, p) {
			t.Errorf("--%s=%s: host path mounted at %q, want %q", flag, p, mounted[p], filepath.Join(root, p))
		}
	}
	if len(mounted) != 3 {
		t.Errorf("host paths mounted: %v, want exactly the three dirs", mounted)
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
	if _, err := pluginentry.Build([]byte(cm.Data["plugin.json"]), "/var/lib/plexus/plexus-cni.kubeconfig", "/var/lib/plexus/reports.sock"); err != nil {
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
	decode(t, "rbac.yaml", &role, &binding)
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}},
		{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"get", "patch"}},
		{APIGroups: []string{""}, Resources: []string{"events"}, Verbs: []string{"create"}},
	}
	if !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("ClusterRole rules = %+v, want only get pods, get+patch nodes, create events", role.Rules)
	}
	var sa corev1.ServiceAccount
	decode(t, "serviceaccount.yaml", &sa)
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0].Name != sa.Name || binding.Subjects[0].Namespace != sa.Namespace {
		t.Errorf("binding %+v does not bind %s to %s/%s", binding, role.Name, sa.Namespace, sa.Name)
	}
}
