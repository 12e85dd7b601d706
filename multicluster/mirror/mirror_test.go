package mirror

import (
	"maps"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// TestMirrorOfCopiesOnlyWhatIsSafe: a remote cluster's labels and
// annotations cannot make a mirror re-exported, claimed by another Link,
// hidden from kube-proxy, zone-aware or anything else here; its opaque
// ports and its own labels are kept, and node ports and the selector are
// dropped.
func TestMirrorOfCopiesOnlyWhatIsSafe(t *testing.T) {
	l := &mc.Link{ObjectMeta: metav1.ObjectMeta{Name: "b"}, Spec: mc.LinkSpec{ClusterName: "b"}}
	remote := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web",
			Labels: map[string]string{
				"app": "web", mc.ExportedLabel: mc.ExportedRemoteDiscovery, mc.LinkLabel: "other",
				"service.kubernetes.io/service-proxy-name": "none", "kubernetes.io/x": "y",
			},
			Annotations: map[string]string{
				"config.plexus.dev/opaque-ports": "9000", "balancer.plexus.dev/zone-aware": "true",
				"service.kubernetes.io/topology-mode": "Auto", corev1.LastAppliedConfigAnnotation: "{}",
			}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: map[string]string{"app": "web"},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, NodePort: 30080, Protocol: corev1.ProtocolTCP}}},
	}
	m := mirrorOf(l, remote, "web-b")
	wantLabels := map[string]string{"app": "web", mc.MirroredServiceLabel: "true", mc.ClusterNameLabel: "b",
		mc.LinkLabel: "b", mc.RemoteNameLabel: "web", mc.RemoteDiscoveryLabel: "b"}
	if !maps.Equal(m.Labels, wantLabels) {
		t.Errorf("labels %v, want %v", m.Labels, wantLabels)
	}
	if want := map[string]string{"config.plexus.dev/opaque-ports": "9000"}; !maps.Equal(m.Annotations, want) {
		t.Errorf("annotations %v, want %v", m.Annotations, want)
	}
	if m.Spec.Type != corev1.ServiceTypeClusterIP || m.Spec.Selector != nil || len(m.Spec.Ports) != 1 || m.Spec.Ports[0].NodePort != 0 || m.Spec.Ports[0].Port != 80 {
		t.Errorf("spec %+v, want a selector-less ClusterIP with port 80 and no node port", m.Spec)
	}
	if !sameMirror(m, mirrorOf(l, remote, "web-b")) {
		t.Error("a mirror differs from itself")
	}
}
