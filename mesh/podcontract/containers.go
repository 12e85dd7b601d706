package podcontract

// ProxyContainerName is the sidecar container that marks a pod as meshed.
const ProxyContainerName = "plexus-proxy"

// TapPortName names the proxy container's tap port: the injector declares
// it, the tap service looks for it.
const TapPortName = "plexus-tap"

// NodeTaintKey is the taint nodes register with until the node agent has
// installed the CNI plugin; the agent removes it, check reports it.
const NodeTaintKey = "plexus.dev/cni-not-ready"

// RunsProxy is the one rule for "is this pod meshed", given a container's
// name, whether it is an init container, and whether its restartPolicy is
// Always: the pod runs the proxy as a plain container, or as a native
// sidecar (an init container with restartPolicy Always). An init container
// of that name without restartPolicy Always runs to completion before the
// app starts and does not count. A pod is meshed when any of its
// containers RunsProxy.
func RunsProxy(name string, init, restartAlways bool) bool {
	return name == ProxyContainerName && (!init || restartAlways)
}
