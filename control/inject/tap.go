package inject

import (
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/plexus-mesh/plexus/cni-plugin/podconfig"
)

// TapPort is where the proxy serves the tap API (DESIGN.md §10). The tap
// service calls it directly, with its own identity, so the pod's inbound
// rules must not redirect it: the injector adds it to the skipped inbound
// ports the pod is admitted with (the CNI plugin reads those), as it does
// for no other port, and leaves the pod's annotation as the user wrote it.
const TapPort = 4190

// admittedRedirect returns the redirect annotations the pod is admitted
// with: a with the tap port skipped inbound.
func admittedRedirect(a map[string]string) map[string]string {
	out := make(map[string]string, len(a)+1)
	for k, v := range a {
		out[k] = v
	}
	port := strconv.Itoa(TapPort)
	if v := strings.TrimSpace(out[podconfig.AnnotationSkipInboundPorts]); v != "" {
		out[podconfig.AnnotationSkipInboundPorts] = v + "," + port
	} else {
		out[podconfig.AnnotationSkipInboundPorts] = port
	}
	return out
}

// Workload labels name the workload that owns a pod, for metrics
// (Prometheus relabels them onto every series of the pod's proxy).
const (
	LabelWorkloadKind = "plexus.dev/workload-kind"
	LabelWorkloadName = "plexus.dev/workload-name"
)

// workload returns the kind and name of the workload that owns pod: a
// ReplicaSet created by a Deployment (the pod-template-hash label) is the
// Deployment; a pod without a controller is itself.
func workload(pod *corev1.Pod) (kind, name string) {
	for _, ref := range pod.OwnerReferences {
		if ref.Controller == nil || !*ref.Controller {
			continue
		}
		if h := pod.Labels["pod-template-hash"]; ref.Kind == "ReplicaSet" && h != "" && strings.HasSuffix(ref.Name, "-"+h) {
			return "Deployment", strings.TrimSuffix(ref.Name, "-"+h)
		}
		return ref.Kind, ref.Name
	}
	name = pod.Name
	if name == "" {
		name = strings.TrimSuffix(pod.GenerateName, "-")
	}
	return "Pod", name
}
