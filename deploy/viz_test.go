package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"
)

// The viz extension's Prometheus: its manifests (plexus-viz/prometheus*.yaml)
// decode strictly into Kubernetes objects, run under Pod Security
// "restricted", and carry a scrape config promtool accepts.

const vizNamespace = "plexus-viz"

// vizObjects decodes every document of plexus-viz/prometheus*.yaml into
// its typed struct, rejecting unknown and duplicate fields.
func vizObjects(t *testing.T) []runtime.Object {
	t.Helper()
	return manifestObjects(t, "plexus-viz/prometheus*.yaml")
}

// manifestObjects decodes every document of the files glob matches into
// its typed struct, rejecting unknown and duplicate fields.
func manifestObjects(t *testing.T, glob string) []runtime.Object {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no %s (%v)", glob, err)
	}
	var objs []runtime.Object
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
		for i := 1; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var tm struct{ APIVersion, Kind string }
			if err := yaml.Unmarshal(doc, &tm); err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			obj, err := scheme.Scheme.New(schema.FromAPIVersionAndKind(tm.APIVersion, tm.Kind))
			if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				t.Fatalf("%s document %d (%s): %v", f, i, tm.Kind, err)
			}
			objs = append(objs, obj)
		}
	}
	return objs
}

// vizObject returns the one object of type T named plexus-prometheus.
func vizObject[T runtime.Object](t *testing.T, objs []runtime.Object) T {
	t.Helper()
	var found []T
	for _, o := range objs {
		if v, ok := o.(T); ok {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("%d objects of type %T, want 1", len(found), zero)
	}
	return found[0]
}

func TestVizPrometheusObjects(t *testing.T) {
	objs := vizObjects(t)
	var got []string
	for _, o := range objs {
		m := o.(interface {
			GetName() string
			GetNamespace() string
		})
		kind := kindOf(o)
		got = append(got, kind+"/"+m.GetName())
		clusterScoped := kind == "ClusterRole" || kind == "ClusterRoleBinding"
		switch {
		case kind == "Namespace":
			t.Errorf("Namespace %s: the viz kustomization owns the namespace", m.GetName())
		case clusterScoped && m.GetNamespace() != "":
			t.Errorf("%s/%s has a namespace", kind, m.GetName())
		case !clusterScoped && m.GetNamespace() != vizNamespace:
			t.Errorf("%s/%s in namespace %q, want %s", kind, m.GetName(), m.GetNamespace(), vizNamespace)
		}
		if m.GetName() != "plexus-prometheus" {
			t.Errorf("%s named %q, want plexus-prometheus", kind, m.GetName())
		}
	}
	slices.Sort(got)
	want := []string{"ClusterRole/plexus-prometheus", "ClusterRoleBinding/plexus-prometheus", "ConfigMap/plexus-prometheus",
		"Deployment/plexus-prometheus", "Service/plexus-prometheus", "ServiceAccount/plexus-prometheus"}
	if !slices.Equal(got, want) {
		t.Errorf("objects %v, want %v", got, want)
	}

	// Least privilege: pods, read only.
	role := vizObject[*rbacv1.ClusterRole](t, objs)
	for _, r := range role.Rules {
		if !slices.Equal(r.APIGroups, []string{""}) || !slices.Equal(r.Resources, []string{"pods"}) {
			t.Errorf("ClusterRole rule %+v: want pods of the core group only", r)
		}
		for _, v := range r.Verbs {
			if v != "get" && v != "list" && v != "watch" {
				t.Errorf("ClusterRole verb %q", v)
			}
		}
	}
	binding := vizObject[*rbacv1.ClusterRoleBinding](t, objs)
	if binding.RoleRef.Name != role.Name || len(binding.Subjects) != 1 ||
		binding.Subjects[0] != (rbacv1.Subject{Kind: "ServiceAccount", Name: "plexus-prometheus", Namespace: vizNamespace}) {
		t.Errorf("ClusterRoleBinding %+v %+v", binding.RoleRef, binding.Subjects)
	}

	d := vizObject[*appsv1.Deployment](t, objs)
	spec := d.Spec.Template.Spec
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 1 || spec.ServiceAccountName != "plexus-prometheus" {
		t.Errorf("Deployment: replicas %v, service account %q", d.Spec.Replicas, spec.ServiceAccountName)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(spec.Containers))
	}
	c := spec.Containers[0]
	if c.Image != "plexus.dev/prometheus:dev" {
		t.Errorf("image %q", c.Image)
	}
	for _, arg := range []string{"--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.retention.time=6h", "--web.listen-address=:9090"} {
		if !slices.Contains(c.Args, arg) {
			t.Errorf("args %v lack %s", c.Args, arg)
		}
	}
	// The TSDB is on an emptyDir (the root filesystem is read-only).
	var tsdb string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--storage.tsdb.path="); ok {
			tsdb = v
		}
	}
	if !mountedFrom(spec, c, tsdb, func(v corev1.Volume) bool { return v.EmptyDir != nil }) {
		t.Errorf("--storage.tsdb.path=%q is not an emptyDir mount", tsdb)
	}
	if !mountedFrom(spec, c, "/etc/prometheus", func(v corev1.Volume) bool {
		return v.ConfigMap != nil && v.ConfigMap.Name == "plexus-prometheus"
	}) {
		t.Error("/etc/prometheus is not the plexus-prometheus ConfigMap")
	}
	for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[res]; !ok {
			t.Errorf("no %s request", res)
		}
		if _, ok := c.Resources.Limits[res]; !ok {
			t.Errorf("no %s limit", res)
		}
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/-/ready" {
		t.Errorf("readiness probe %+v, want GET /-/ready", p)
	}
	// Not meshed: the viz namespace is not injected, and neither is this pod.
	for k, v := range d.Spec.Template.Annotations {
		if k == "plexus.dev/inject" && v == "enabled" {
			t.Error("the Prometheus pod asks to be injected")
		}
	}
	checkRestricted(t, spec)

	svc := vizObject[*corev1.Service](t, objs)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 9090 || svc.Spec.Ports[0].TargetPort.String() != c.Ports[0].Name {
		t.Errorf("Service ports %+v, want 9090 to the container's %q", svc.Spec.Ports, c.Ports[0].Name)
	}
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %s=%s does not select the pod (labels %v)", k, v, d.Spec.Template.Labels)
		}
	}
}

func kindOf(o runtime.Object) string {
	gvks, _, err := scheme.Scheme.ObjectKinds(o)
	if err != nil || len(gvks) == 0 {
		return "?"
	}
	return gvks[0].Kind
}

// mountedFrom says whether c mounts, at path, a volume of spec that ok
// accepts.
func mountedFrom(spec corev1.PodSpec, c corev1.Container, path string, ok func(corev1.Volume) bool) bool {
	for _, m := range c.VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name == m.Name && ok(v) {
				return true
			}
		}
	}
	return false
}

// checkRestricted checks spec against the rules of Pod Security
// "restricted" (and baseline, which it includes) that a manifest decides.
func checkRestricted(t *testing.T, spec corev1.PodSpec) {
	t.Helper()
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Error("host namespaces")
	}
	for _, v := range spec.Volumes {
		if v.ConfigMap == nil && v.EmptyDir == nil && v.Projected == nil && v.Secret == nil && v.DownwardAPI == nil &&
			v.PersistentVolumeClaim == nil && v.Ephemeral == nil && v.CSI == nil {
			t.Errorf("volume %s: a type restricted does not allow", v.Name)
		}
	}
	psc := spec.SecurityContext
	if psc == nil {
		psc = &corev1.PodSecurityContext{}
	}
	for _, c := range append(append([]corev1.Container{}, spec.InitContainers...), spec.Containers...) {
		sc := c.SecurityContext
		if sc == nil {
			sc = &corev1.SecurityContext{}
		}
		nonRoot := sc.RunAsNonRoot
		if nonRoot == nil {
			nonRoot = psc.RunAsNonRoot
		}
		user := sc.RunAsUser
		if user == nil {
			user = psc.RunAsUser
		}
		seccomp := sc.SeccompProfile
		if seccomp == nil {
			seccomp = psc.SeccompProfile
		}
		switch {
		case nonRoot == nil || !*nonRoot:
			t.Errorf("container %s: runAsNonRoot is not true", c.Name)
		case user != nil && *user == 0:
			t.Errorf("container %s runs as root", c.Name)
		case seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault && seccomp.Type != corev1.SeccompProfileTypeLocalhost:
			t.Errorf("container %s: seccomp profile %+v", c.Name, seccomp)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s: allowPrivilegeEscalation is not false", c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("container %s is privileged", c.Name)
		case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}):
			t.Errorf("container %s: capabilities do not drop ALL", c.Name)
		case len(sc.Capabilities.Add) > 0:
			t.Errorf("container %s adds capabilities %v", c.Name, sc.Capabilities.Add)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s: root filesystem is writable", c.Name)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				t.Errorf("container %s: host port %d", c.Name, p.HostPort)
			}
		}
	}
}

// prometheusYML returns the scrape config of the ConfigMap.
func prometheusYML(t *testing.T) string {
	t.Helper()
	cm := vizObject[*corev1.ConfigMap](t, vizObjects(t))
	y, ok := cm.Data["prometheus.yml"]
	if !ok {
		t.Fatal("the ConfigMap has no prometheus.yml")
	}
	return y
}

// scrapeConfig is the part of prometheus.yml these tests read.
type scrapeConfig struct {
	Global struct {
		ScrapeInterval string `json:"scrape_interval"`
		ScrapeTimeout  string `json:"scrape_timeout"`
	} `json:"global"`
	ScrapeConfigs []struct {
		JobName        string `json:"job_name"`
		RelabelConfigs []struct {
			TargetLabel string `json:"target_label"`
		} `json:"relabel_configs"`
	} `json:"scrape_configs"`
}

func parseScrapeConfig(t *testing.T) scrapeConfig {
	t.Helper()
	var c scrapeConfig
	if err := yaml.Unmarshal([]byte(prometheusYML(t)), &c); err != nil {
		t.Fatal(err)
	}
	return c
}

// jobTargetLabels returns the labels job's relabelling writes onto its
// targets (and so onto every series scraped from them), plus job and
// instance, which Prometheus adds.
func jobTargetLabels(t *testing.T, job string) []string {
	t.Helper()
	for _, sc := range parseScrapeConfig(t).ScrapeConfigs {
		if sc.JobName != job {
			continue
		}
		out := []string{"job", "instance"}
		for _, r := range sc.RelabelConfigs {
			if r.TargetLabel != "" && !strings.HasPrefix(r.TargetLabel, "__") {
				out = append(out, r.TargetLabel)
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	t.Fatalf("no job %s", job)
	return nil
}

func TestVizScrapeConfig(t *testing.T) {
	c := parseScrapeConfig(t)
	if c.Global.ScrapeInterval != "10s" || c.Global.ScrapeTimeout != "5s" {
		t.Errorf("scrape interval %q, timeout %q; want 10s and 5s", c.Global.ScrapeInterval, c.Global.ScrapeTimeout)
	}
	var jobs []string
	for _, sc := range c.ScrapeConfigs {
		jobs = append(jobs, sc.JobName)
	}
	if want := []string{"plexus-proxy", "plexus-control", "prometheus"}; !slices.Equal(jobs, want) {
		t.Errorf("jobs %v, want %v", jobs, want)
	}
	want := []string{"instance", "job", "namespace", "pod", "workload_kind", "workload_name"}
	if got := jobTargetLabels(t, "plexus-proxy"); !slices.Equal(got, want) {
		t.Errorf("plexus-proxy target labels %v, want %v", got, want)
	}
	if got := jobTargetLabels(t, "plexus-control"); !slices.Equal(got, append([]string{"component"}, want...)) {
		t.Errorf("plexus-control target labels %v, want component and %v", got, want)
	}

	promtool := prometheusTool(t, "promtool")
	file := filepath.Join(t.TempDir(), "prometheus.yml")
	if err := os.WriteFile(file, []byte(prometheusYML(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "config", file).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
}

// prometheusTool returns the path of the Prometheus build's tool (prometheus
// or promtool) that integration/cluster/deps.sh prometheus makes. Without
// it the test is skipped, except in CI, where make test has built it.
func prometheusTool(t *testing.T, name string) string {
	t.Helper()
	out, err := exec.Command("bash", "-c", `source ../integration/cluster/env.sh && echo "$PROMETHEUS_BIN"`).Output()
	if err != nil {
		t.Fatalf("reading PROMETHEUS_BIN from integration/cluster/env.sh: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(out)), name)
	if _, err := os.Stat(path); err != nil {
		msg := name + " is not built (" + path + "): run integration/cluster/deps.sh prometheus"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return path
}
