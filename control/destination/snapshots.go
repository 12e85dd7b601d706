package destination

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// Publishers' snapshots, computed from the watcher's informer caches.

// snapshot computes the state of publisher pk from the caches.
func (w *watcher) snapshot(pk pubKey) snapshot {
	if pk.IP.IsValid() {
		return w.podIPSnapshot(pk.IP, pk.Port)
	}
	return w.serviceSnapshot(pk.Namespace, pk.Name, pk.Port)
}

// serviceSnapshot: the ready and the terminating-but-serving endpoints of
// the service's port. A service that does not exist, or is of type
// ExternalName (proxies should resolve it through DNS), has exists=false.
// A service without that port exists but has no endpoints.
func (w *watcher) serviceSnapshot(ns, name string, port uint16) snapshot {
	fqdn := target{Namespace: ns, Name: name}.fqdn(w.cfg.ClusterDomain)
	s := snapshot{
		setLabels: map[string]string{"namespace": ns, "service": name},
		endpoints: map[netip.AddrPort]endpoint{},
		profile:   profile{fqn: fqdn},
	}
	svc, err := w.svcList.Services(ns).Get(name)
	if err != nil || svc.Spec.Type == corev1.ServiceTypeExternalName {
		return s
	}
	s.exists = true
	if c := remoteOf(svc); c != "" && w.remote != nil {
		return w.remote.mirrorSnapshot(c, svc, port, s)
	}
	if svc.Labels[mc.FederatedLabel] != "" && w.remote != nil {
		return w.federatedSnapshot(svc, port, s)
	}
	s.profile.opaque = OpaquePort(svc.Annotations, port)
	var svcPort *corev1.ServicePort
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.Port == int32(port) && (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) {
			svcPort = p
		}
	}
	if svcPort == nil {
		return s
	}
	objs, _ := w.slices.GetIndexer().ByIndex(indexService, ns+"/"+name)
	for _, obj := range objs {
		slice := obj.(*discoveryv1.EndpointSlice)
		if slice.AddressType != discoveryv1.AddressTypeIPv4 && slice.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		targetPort, ok := SlicePort(slice, svcPort.Name)
		if !ok {
			continue
		}
		for i := range slice.Endpoints {
			w.addSliceEndpoint(&s, &slice.Endpoints[i], ns, targetPort)
		}
	}
	return s
}

// SlicePort is the target port of the slice's port named like the service
// port (EndpointSlice ports carry the service port's name).
func SlicePort(slice *discoveryv1.EndpointSlice, name string) (uint16, bool) {
	for _, p := range slice.Ports {
		pname := ""
		if p.Name != nil {
			pname = *p.Name
		}
		if pname != name || p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
			continue
		}
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		return uint16(*p.Port), true
	}
	return 0, false
}

// addSliceEndpoint adds ep to s if its conditions say it takes traffic
// (see SliceEndpointState) and its pod (when it names one) still exists
// and runs. An address that several slices list is ready if any of them
// says so.
func (w *watcher) addSliceEndpoint(s *snapshot, ep *discoveryv1.Endpoint, ns string, port uint16) {
	publish, terminating := SliceEndpointState(ep.Conditions)
	if !publish {
		return
	}
	var pod *corev1.Pod
	if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" {
		podNS := ref.Namespace
		if podNS == "" {
			podNS = ns
		}
		p, err := w.podList.Pods(podNS).Get(ref.Name)
		if err != nil || terminal(p) {
			return // deleted or finished: gone before the slice says so
		}
		pod = p
	}
	zone := ""
	if ep.Zone != nil {
		zone = *ep.Zone
	}
	for _, a := range ep.Addresses {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			continue
		}
		addr := netip.AddrPortFrom(ip.Unmap(), port)
		if seen, ok := s.endpoints[addr]; ok && !seen.terminating {
			continue
		}
		e := w.podEndpoint(addr, pod, zone)
		e.terminating = terminating
		s.endpoints[addr] = e
	}
}

// SliceEndpointState reads an EndpointSlice endpoint's conditions as the
// API defines them: a ready one (ready unset counts as ready) is
// published; one not ready but serving and terminating (a pod shutting
// down gracefully) is published as terminating; any other is not
// published (serving or terminating unset counts as false).
func SliceEndpointState(c discoveryv1.EndpointConditions) (publish, terminating bool) {
	switch {
	case c.Ready == nil || *c.Ready:
		return true, false
	case c.Serving != nil && *c.Serving && c.Terminating != nil && *c.Terminating:
		return true, true
	}
	return false, false
}

// podIPSnapshot: the pod with IP ip, whether ready or not (the client
// dials that IP anyway). No such pod: exists=false.
func (w *watcher) podIPSnapshot(ip netip.Addr, port uint16) snapshot {
	s := snapshot{endpoints: map[netip.AddrPort]endpoint{}}
	objs, _ := w.pods.GetIndexer().ByIndex(indexPodIP, ip.String())
	var pod *corev1.Pod
	for _, obj := range objs {
		p := obj.(*corev1.Pod)
		if terminal(p) {
			continue
		}
		if pod == nil || p.CreationTimestamp.After(pod.CreationTimestamp.Time) {
			pod = p
		}
	}
	if pod == nil {
		if w.remote != nil {
			return w.remote.podIPSnapshot(ip, port, s)
		}
		return s
	}
	s.exists = true
	s.setLabels = map[string]string{"namespace": pod.Namespace}
	addr := netip.AddrPortFrom(ip, port)
	s.endpoints[addr] = w.podEndpoint(addr, pod, "")
	s.profile.opaque = OpaquePort(pod.Annotations, port)
	return s
}
