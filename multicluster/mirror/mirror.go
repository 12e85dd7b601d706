package mirror

import (
	"maps"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// mirrorOf is the mirror of remote Service svc for Link l (in gateway mode
// when svc is exported so: GatewayLabel): selector-less,
// ClusterIP, the remote ports (node ports dropped), and the labels that
// say what it mirrors. Of what the remote cluster wrote it copies only
// what cannot change how this cluster treats the mirror: labels but the
// extension's own (no re-export) and Kubernetes' (service-proxy-name would
// hide it from kube-proxy), and the Plexus proxy configuration
// annotations (opaque ports); not zone-aware balancing (the other
// cluster's zones mean nothing here) nor any other annotation.
func mirrorOf(l *mc.Link, svc *corev1.Service, name string) *corev1.Service {
	lbls := map[string]string{}
	for k, v := range svc.Labels {
		if !extensionKey(k) && !kubernetesKey(k) {
			lbls[k] = v
		}
	}
	maps.Copy(lbls, map[string]string{
		mc.MirroredServiceLabel: "true",
		mc.ClusterNameLabel:     l.Spec.ClusterName,
		mc.LinkLabel:            l.Name,
		mc.RemoteNameLabel:      svc.Name,
		mc.RemoteDiscoveryLabel: l.Spec.ClusterName,
	})
	if svc.Labels[mc.ExportedLabel] == mc.ExportedGateway {
		lbls[mc.GatewayLabel] = l.Spec.ClusterName
	}
	annotations := proxyAnnotations(svc)
	var ports []corev1.ServicePort
	for _, p := range svc.Spec.Ports {
		ports = append(ports, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, AppProtocol: p.AppProtocol})
	}
	m := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: name, Labels: lbls, Annotations: annotations},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: ports},
	}
	if mirroredHeadless(svc) {
		m.Spec.ClusterIP = corev1.ClusterIPNone // headless.go
	}
	return m
}

// proxyAnnotations are svc's Plexus proxy configuration annotations
// (opaque ports), which a mirror keeps.
func proxyAnnotations(svc *corev1.Service) map[string]string {
	out := map[string]string{}
	for k, v := range svc.Annotations {
		if strings.HasPrefix(k, podcontract.AnnotationPrefix) {
			out[k] = v
		}
	}
	return out
}

// extensionKey reports whether a label or annotation key is the
// extension's, never copied onto a mirror.
func extensionKey(k string) bool {
	return strings.HasPrefix(k, "mirror.plexus.dev/") || strings.HasPrefix(k, "multicluster.plexus.dev/")
}

// kubernetesKey reports whether a label key is in one of Kubernetes' own
// prefixes (kubernetes.io, k8s.io and their subdomains).
func kubernetesKey(k string) bool {
	prefix, _, ok := strings.Cut(k, "/")
	return ok && (prefix == "kubernetes.io" || prefix == "k8s.io" || strings.HasSuffix(prefix, ".kubernetes.io") || strings.HasSuffix(prefix, ".k8s.io"))
}

// sameMirror reports whether cur already is want, as far as the mirror
// decides (the API server fills in the rest).
func sameMirror(cur, want *corev1.Service) bool {
	if !maps.Equal(cur.Labels, want.Labels) || !maps.Equal(nonNil(cur.Annotations), want.Annotations) || len(cur.Spec.Ports) != len(want.Spec.Ports) {
		return false
	}
	for i, p := range cur.Spec.Ports {
		w := want.Spec.Ports[i]
		if p.Name != w.Name || p.Port != w.Port || p.Protocol != w.Protocol || !reflect.DeepEqual(p.AppProtocol, w.AppProtocol) {
			return false
		}
	}
	return true
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
