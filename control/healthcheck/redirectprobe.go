package healthcheck

import (
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// envRedirectProbe is the proxy's redirect probe port setting
// (sidecar/config).
const envRedirectProbe = "PLEXUS_PROXY_REDIRECT_PROBE_PORT"

// redirectProof says what proves a meshed pod's redirect rules now.
type redirectProof int

const (
	// proofNone: the proxy has no redirect probe (injected before it
	// existed, or by hand): nothing the check can read proves the rules.
	proofNone redirectProof = iota
	// proofPending: the proxy's readiness probe goes through the inbound
	// redirect but is not passing (starting, or the rules are gone).
	proofPending
	// proofProbe: the kubelet's readiness probe reached the proxy through
	// the inbound REDIRECT within its last period: nothing listens on the
	// probe port, so without the rule it would be refused.
	proofProbe
)

// redirectProofOf reads pod's proxy container: whether its readiness probe
// targets its redirect probe port, and whether it is passing.
func redirectProofOf(pod *corev1.Pod) redirectProof {
	var proxy *corev1.Container
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for i := range cs {
			if cs[i].Name == meshpod.ProxyContainerName {
				proxy = &cs[i]
			}
		}
	}
	if proxy == nil || proxy.ReadinessProbe == nil || proxy.ReadinessProbe.HTTPGet == nil {
		return proofNone
	}
	port := 0
	for _, e := range proxy.Env {
		if e.Name == envRedirectProbe {
			port, _ = strconv.Atoi(e.Value)
		}
	}
	if port == 0 || proxy.ReadinessProbe.HTTPGet.Port.IntValue() != port {
		return proofNone
	}
	for _, ss := range [][]corev1.ContainerStatus{pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses} {
		for _, s := range ss {
			if s.Name == meshpod.ProxyContainerName && s.Ready {
				return proofProbe
			}
		}
	}
	return proofPending
}
