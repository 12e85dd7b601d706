package destination

import (
	"maps"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// endpoint is one address a proxy may send to, with what it needs to know
// about the pod behind it.
type endpoint struct {
	addr     netip.AddrPort
	identity string            // SPIFFE ID; empty when the pod is not meshed
	opaque   bool              // the target port is in the pod's opaque-ports
	labels   map[string]string // pod, owner_kind, owner_name, serviceaccount, zone
	// terminating: not ready, but serving while its pod shuts down; a
	// proxy sends it nothing new while any endpoint of the set is not
	// terminating.
	terminating bool
	// via: the linked cluster's gateway that reaches addr (gateway mode);
	// zero otherwise.
	via netip.AddrPort
}

func (e endpoint) equal(o endpoint) bool {
	return e.addr == o.addr && e.identity == o.identity && e.opaque == o.opaque && e.terminating == o.terminating && e.via == o.via && maps.Equal(e.labels, o.labels)
}

// profile is what GetProfile streams.
type profile struct {
	fqn    string
	opaque bool
}

// snapshot is the state of one publisher.
type snapshot struct {
	exists    bool                        // the service (or pod IP) is known
	setLabels map[string]string           // namespace, service
	endpoints map[netip.AddrPort]endpoint // ready and terminating endpoints
	profile   profile
}

// podEndpoint describes addr served by pod (nil when the endpoint has no
// pod, e.g. a hand-written EndpointSlice) in w's cluster. zone may be
// empty.
func (w *watcher) podEndpoint(addr netip.AddrPort, pod *corev1.Pod, zone string) endpoint {
	ep := endpoint{addr: addr, labels: map[string]string{}}
	if zone != "" {
		ep.labels["zone"] = zone
	}
	if w.cluster != "" {
		ep.labels["cluster"] = w.cluster
	}
	if pod == nil {
		return ep
	}
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	ep.labels["pod"] = pod.Name
	ep.labels["serviceaccount"] = sa
	if kind, name := podOwner(pod); kind != "" {
		ep.labels["owner_kind"] = kind
		ep.labels["owner_name"] = name
	}
	if meshpod.IsMeshed(pod) {
		ep.identity = spiffe.New(w.cfg.TrustDomain, pod.Namespace, sa).String()
	}
	ep.opaque = OpaquePort(pod.Annotations, addr.Port())
	return ep
}

// podOwner names the controller of pod; a ReplicaSet created by a
// Deployment is reported as that Deployment, as users think of it.
func podOwner(pod *corev1.Pod) (kind, name string) {
	ref := metav1.GetControllerOf(pod)
	if ref == nil {
		return "", ""
	}
	if ref.Kind == "ReplicaSet" {
		if hash := pod.Labels["pod-template-hash"]; hash != "" {
			if deploy, ok := strings.CutSuffix(ref.Name, "-"+hash); ok {
				return "Deployment", deploy
			}
		}
	}
	return ref.Kind, ref.Name
}

// OpaquePort reports whether port is listed in the opaque-ports annotation
// of annotations. A malformed annotation lists nothing; the watcher logs it
// when the object changes (see warnMalformed).
func OpaquePort(annotations map[string]string, port uint16) bool {
	value, ok := annotations[podcontract.AnnotationOpaquePorts]
	if !ok {
		return false
	}
	ranges, err := podcontract.ParsePorts(value)
	if err != nil {
		return false
	}
	for _, r := range ranges {
		if r.Contains(port) {
			return true
		}
	}
	return false
}

// podIPs returns the IPs of pod that the pod-IP index and lookups use:
// none for host-network pods, whose IP is the node's.
func podIPs(pod *corev1.Pod) []netip.Addr { return meshpod.IPs(pod) }

// terminal reports whether pod has finished and serves nothing.
func terminal(pod *corev1.Pod) bool {
	return pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
}
