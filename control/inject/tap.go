package inject

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/plexus-mesh/plexus/mesh/meshpod"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// TapPort is where the proxy serves the tap API (ARCHITECTURE.md §10). The tap
// service calls it directly, with its own identity, so the pod's inbound
// rules must not redirect it: the injector adds it to the skipped inbound
// ports the pod is admitted with (the CNI plugin reads those), as it does
// for no other port, and leaves the pod's annotation as the user wrote it.
const TapPort = 4190

// admitted returns the redirect annotations the pod is admitted with:
// its own, plus the tap port skipped inbound when the proxy serves it.
func (s settings) admitted() map[string]string {
	if !s.tap {
		return s.annotations
	}
	return admittedRedirect(s.annotations)
}

// tapPort is the proxy's PLEXUS_PROXY_TAP_PORT.
func (s settings) tapPort() string {
	if !s.tap {
		return "off"
	}
	return strconv.Itoa(TapPort)
}

// declares reports whether a container of pod declares TCP port.
func declares(pod *corev1.Pod, port int32) bool {
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			for _, p := range c.Ports {
				if p.ContainerPort == port && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
					return true
				}
			}
		}
	}
	return false
}

// admittedRedirect returns a with the tap port skipped inbound.
func admittedRedirect(a map[string]string) map[string]string {
	out := make(map[string]string, len(a)+1)
	for k, v := range a {
		out[k] = v
	}
	port := strconv.Itoa(TapPort)
	if v := strings.TrimSpace(out[podcontract.AnnotationSkipInboundPorts]); v != "" {
		out[podcontract.AnnotationSkipInboundPorts] = v + "," + port
	} else {
		out[podcontract.AnnotationSkipInboundPorts] = port
	}
	return out
}

// podLabels are the labels the injector sets: the proxy's version and the
// workload that owns the pod, from its controller reference (never from
// labels the pod came with), left out when a name cannot be a label
// value (over 63 characters): Prometheus then falls back to the
// controller it discovers.
func podLabels(pod *corev1.Pod, cfg Config) map[string]string {
	l := map[string]string{LabelProxyVersion: cfg.ProxyVersion}
	kind, name := meshpod.Owner(pod)
	if len(validation.IsValidLabelValue(kind)) == 0 && len(validation.IsValidLabelValue(name)) == 0 {
		l[meshpod.LabelWorkloadKind], l[meshpod.LabelWorkloadName] = kind, name
	}
	return l
}
