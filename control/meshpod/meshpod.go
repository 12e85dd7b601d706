// Package meshpod answers whether a pod is part of the mesh: whether it runs
// the plexus-proxy sidecar. It imports only k8s.io/api/core/v1. The CNI
// plugin links nothing of k8s.io (its init costs milliseconds per call) and
// applies the same rule to its own minimal pod type; a test of
// cni-plugin/plugin holds the two equal.
package meshpod

import corev1 "k8s.io/api/core/v1"

// ProxyContainerName is the sidecar container that marks a pod as meshed.
const ProxyContainerName = "plexus-proxy"

// IsMeshed reports whether pod runs the proxy, as a plain container or as a
// native sidecar (an init container with restartPolicy Always). An init
// container of that name without restartPolicy Always runs to completion
// before the app starts and does not count.
func IsMeshed(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	for _, c := range pod.Spec.Containers {
		if c.Name == ProxyContainerName {
			return true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if c.Name == ProxyContainerName && c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			return true
		}
	}
	return false
}
