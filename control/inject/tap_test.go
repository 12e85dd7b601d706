package inject

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

func TestPodLabels(t *testing.T) {
	yes := true
	owned := func(name, hash string, labels map[string]string) *corev1.Pod {
		l := map[string]string{"pod-template-hash": hash}
		for k, v := range labels {
			l[k] = v
		}
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: name + "-" + hash + "-", Labels: l,
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: name + "-" + hash, Controller: &yes}}}}
	}
	cfg := Config{ProxyVersion: "dev"}
	for _, c := range []struct {
		name       string
		pod        *corev1.Pod
		kind, want string
	}{
		{"a Deployment's pod", owned("web", "7d9f8c", nil), "Deployment", "web"},
		{"labels it came with do not count", owned("web", "7d9f8c", map[string]string{meshpod.LabelWorkloadName: "books"}), "Deployment", "web"},
		{"a name too long for a label value", owned(strings.Repeat("w", 70), "7d9f8c", nil), "", ""},
		{"a bare pod", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "solo"}}, "Pod", "solo"},
	} {
		l := podLabels(c.pod, cfg)
		if l[meshpod.LabelWorkloadKind] != c.kind || l[meshpod.LabelWorkloadName] != c.want || l[LabelProxyVersion] != "dev" {
			t.Errorf("%s: labels %v, want workload %s/%s", c.name, l, c.kind, c.want)
		}
	}
}

// TestAppOnTheTapPort: a pod whose app declares 4190 keeps it: the proxy
// serves no tap, and the port is not skipped inbound.
func TestAppOnTheTapPort(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "app", Namespace: "ns"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Ports: []corev1.ContainerPort{{ContainerPort: TapPort}}}}}}
	for _, declared := range []bool{true, false} {
		p := pod.DeepCopy()
		if !declared {
			p.Spec.Containers[0].Ports = nil
		}
		ops, err := Patch(p, nil, Config{ProxyImage: "proxy", ProxyVersion: "dev", ControlNamespace: "plexus-system", TrustDomain: "cluster.local", Resources: DefaultResources()})
		if err != nil {
			t.Fatal(err)
		}
		var ctr corev1.Container
		for _, op := range ops {
			switch v := op.Value.(type) {
			case corev1.Container:
				ctr = v
			case []any:
				if c, ok := v[0].(corev1.Container); ok {
					ctr = c
				}
			}
		}
		env := map[string]string{}
		for _, e := range ctr.Env {
			env[e.Name] = e.Value
		}
		hasPort := false
		for _, port := range ctr.Ports {
			hasPort = hasPort || port.Name == "plexus-tap"
		}
		skips := strings.Contains(env["PLEXUS_REDIRECT_ANNOTATIONS"], "4190")
		if declared == (env["PLEXUS_PROXY_TAP_PORT"] == "4190") || declared == hasPort || declared == skips {
			t.Errorf("app declares 4190: %v; tap env %q, tap port %v, skipped inbound %v", declared, env["PLEXUS_PROXY_TAP_PORT"], hasPort, skips)
		}
	}
}
