package inject

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/control/meshpod"
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
