// Package meshpod answers whether a pod is part of the mesh: whether it runs
// the plexus-proxy sidecar. It imports only k8s.io/api/core/v1. The CNI
// plugin links nothing of k8s.io (its init costs milliseconds per call) and
// applies the same rule to its own minimal pod type; a test of
// cni-plugin/plugin holds the two equal.
package meshpod

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"

	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// ProxyContainerName is the sidecar container that marks a pod as meshed.
const ProxyContainerName = podcontract.ProxyContainerName

// TapPortName names the proxy container's tap port.
const TapPortName = podcontract.TapPortName

// IsMeshed reports whether pod runs the proxy, as a plain container or as a
// native sidecar (an init container with restartPolicy Always). An init
// container of that name without restartPolicy Always runs to completion
// before the app starts and does not count.
func IsMeshed(pod *corev1.Pod) bool {
	if pod == nil {
		return false
	}
	for _, c := range pod.Spec.Containers {
		if podcontract.RunsProxy(c.Name, false, false) {
			return true
		}
	}
	for _, c := range pod.Spec.InitContainers {
		if podcontract.RunsProxy(c.Name, true, c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways) {
			return true
		}
	}
	return false
}

// IPs returns the pod's own IPs from its status (status.podIPs, else
// status.podIP), IPv4-mapped addresses unmapped; none for a host-network
// pod, whose IP is the node's.
func IPs(pod *corev1.Pod) []netip.Addr {
	if pod == nil || pod.Spec.HostNetwork {
		return nil
	}
	var out []netip.Addr
	for _, p := range pod.Status.PodIPs {
		if ip, err := netip.ParseAddr(p.IP); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	if len(out) == 0 && pod.Status.PodIP != "" {
		if ip, err := netip.ParseAddr(pod.Status.PodIP); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}
