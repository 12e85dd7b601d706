package destination

// Federated Services (multicluster): a local Service labelled
// mc.FederatedLabel=<name> (which the service mirror keeps, selector-less)
// is answered with the endpoints of every member: this cluster's Service
// <name> of the same namespace while it is exported as federated, and
// that of each linked cluster the Service's mc.FederatedClustersAnnotation
// lists, while that cluster's Service is exported so, its watcher has
// synced and its API server answers its health checks (health.go). A
// member's pods are reached at their own addresses (flat), each with its
// own cluster's identity.

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// federatedSnapshot is the snapshot of federated Service svc: base (its
// own, with no endpoints) with every serving member's endpoints.
func (w *watcher) federatedSnapshot(svc *corev1.Service, port uint16, base snapshot) snapshot {
	name := svc.Labels[mc.FederatedLabel]
	base.profile.opaque = OpaquePort(svc.Annotations, port)
	add := func(from *watcher) {
		m, err := from.svcList.Services(svc.Namespace).Get(name)
		if err != nil || m.Labels[mc.ExportedLabel] != mc.ExportedFederated {
			return
		}
		for a, e := range from.serviceSnapshot(svc.Namespace, name, port).endpoints {
			base.endpoints[a] = e
		}
	}
	add(w)
	for _, cluster := range federatedClusters(svc) {
		if rw := w.remote.servingCluster(cluster); rw != nil {
			add(rw)
		}
	}
	return base
}

// federatedClusters are the linked clusters federated Service svc spans.
func federatedClusters(svc *corev1.Service) []string {
	if svc.Labels[mc.FederatedLabel] == "" || svc.Annotations[mc.FederatedClustersAnnotation] == "" {
		return nil
	}
	return strings.Split(svc.Annotations[mc.FederatedClustersAnnotation], ",")
}

// servingCluster is cluster name's synced watcher while its API server
// passes its health checks; nil otherwise.
func (r *remoteClusters) servingCluster(name string) *watcher {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.clusters[name]
	if c == nil {
		return nil
	}
	if p := r.apiProbes[name]; p != nil && p.down {
		return nil
	}
	return c.w
}

// indexFederatedMember indexes the federated Services by their local
// member's ns/name.
func indexFederatedMember(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok || svc.Labels[mc.FederatedLabel] == "" {
		return nil, nil
	}
	return []string{svc.Namespace + "/" + svc.Labels[mc.FederatedLabel]}, nil
}

// enqueueFederated queues the federated Services whose local member is
// ns/name.
func (w *watcher) enqueueFederated(ns, name string) {
	objs, _ := w.services.GetIndexer().ByIndex(indexFederated, ns+"/"+name)
	for _, obj := range objs {
		svc := obj.(*corev1.Service)
		w.queue.Add(key{Namespace: svc.Namespace, Name: svc.Name})
	}
}
