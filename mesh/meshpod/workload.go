package meshpod

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Workload labels name the workload that owns a meshed pod; the injector
// sets them, and Prometheus relabels them onto every series of the pod's
// proxy (workload_kind, workload_name).
const (
	LabelWorkloadKind = "plexus.dev/workload-kind"
	LabelWorkloadName = "plexus.dev/workload-name"
)

// Workload returns the kind and name of the workload that owns pod: its
// workload labels when it has them, else Owner's answer.
func Workload(pod *corev1.Pod) (kind, name string) {
	if k, n := pod.Labels[LabelWorkloadKind], pod.Labels[LabelWorkloadName]; k != "" && n != "" {
		return k, n
	}
	return Owner(pod)
}

// Owner returns the kind and name of the workload that owns pod, from
// its controller reference alone: a ReplicaSet created by a Deployment
// (the pod-template-hash label) is the Deployment; a pod without a
// controller is itself.
func Owner(pod *corev1.Pod) (kind, name string) {
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
