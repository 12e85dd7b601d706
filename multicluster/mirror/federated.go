package mirror

// Federated Services: a Service <name> exported as federated
// (mc.ExportedFederated) in any of the clusters, this one included, makes
// one Service <name>-federated here, in the same namespace, that spans
// them all. The service mirror decides its members: this cluster's
// Service while it is exported so, and each Link's Service of that
// namespace and name while the Link selects it, exports it so, and is
// trusted; it writes the linked ones in mc.FederatedClustersAnnotation.
// Destination answers the federated Service with every member's
// endpoints (control/destination/federated.go), so a member's churn costs
// no write here; only a change of membership does. A member is never
// mirrored on its own (<name>-<cluster>).

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// federated reports whether svc is a federated Service's member.
func federated(svc *corev1.Service) bool {
	return svc.Labels[mc.ExportedLabel] == mc.ExportedFederated
}

// federatedName is the federated Service of members named name.
func federatedName(name string) string { return name + mc.FederatedSuffix }

// member is one linked cluster's member of a federated Service.
type member struct {
	link    string
	cluster string
	svc     *corev1.Service
}

// federatedMembers are this cluster's member of ns/name (nil: none) and
// the linked clusters' (sorted by cluster name).
func (c *Controller) federatedMembers(ns, name string) (*corev1.Service, []member) {
	var local *corev1.Service
	if obj, ok, _ := c.members.GetStore().GetByKey(ns + "/" + name); ok && federated(obj.(*corev1.Service)) {
		local = obj.(*corev1.Service)
	}
	var out []member
	for _, obj := range c.links.GetStore().List() {
		l, err := mc.DecodeLink(obj.(*unstructured.Unstructured))
		if err != nil || l.DeletionTimestamp != nil {
			continue
		}
		r := c.remoteOf(l.Name)
		if r == nil || !r.synced() || r.trust.refused {
			continue
		}
		if svc, err := r.services.Services(ns).Get(name); err == nil && federated(svc) {
			out = append(out, member{link: l.Name, cluster: l.Spec.ClusterName, svc: svc})
		}
	}
	slices.SortFunc(out, func(a, b member) int { return strings.Compare(a.cluster, b.cluster) })
	return local, out
}

// syncFederated creates, updates or deletes the federated Service of the
// members ns/name, and records the outcome in each member's Link.
func (c *Controller) syncFederated(ctx context.Context, ns, name string) error {
	local, members := c.federatedMembers(ns, name)
	fedName := federatedName(name)
	services := c.kube.CoreV1().Services(ns)
	var cur *corev1.Service
	if obj, ok, _ := c.mirrors.GetStore().GetByKey(ns + "/" + fedName); ok && obj.(*corev1.Service).Labels[mc.FederatedLabel] == name {
		cur = obj.(*corev1.Service).DeepCopy()
	}
	if local == nil && len(members) == 0 {
		if cur == nil {
			return nil
		}
		uid := cur.UID
		err := services.Delete(ctx, fedName, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return err
		}
		c.log.Info("federated Service deleted: no member left", "service", ns+"/"+fedName)
		return nil
	}
	want := federatedOf(ns, name, local, members)
	var err error
	res := result{reasonMirrored, ""}
	switch {
	case cur == nil:
		_, err = services.Create(ctx, want, metav1.CreateOptions{})
		switch {
		case apierrors.IsAlreadyExists(err):
			if got, gerr := services.Get(ctx, fedName, metav1.GetOptions{}); gerr == nil && got.Labels[mc.FederatedLabel] == name {
				// Ours, made by a sync the cache has not seen yet.
				c.queue.AddAfter(item{federated: true, ns: ns, name: name}, 100*time.Millisecond)
				return nil
			}
			res = result{reasonNameCollision, fmt.Sprintf("Service %s/%s exists and is not the federated Service of %s", ns, fedName, name)}
			err = nil
		case apierrors.IsNotFound(err):
			res = result{reasonMissingNamespace, fmt.Sprintf("namespace %s does not exist here", ns)}
			err = nil
		case err == nil:
			c.log.Info("federated Service created", "service", ns+"/"+fedName, "clusters", want.Annotations[mc.FederatedClustersAnnotation], "local", local != nil)
		}
	case !sameMirror(cur, want):
		cur.Labels, cur.Annotations, cur.Spec.Ports = want.Labels, want.Annotations, want.Spec.Ports
		_, err = services.Update(ctx, cur, metav1.UpdateOptions{})
		if err == nil {
			c.log.Info("federated Service updated", "service", ns+"/"+fedName, "clusters", want.Annotations[mc.FederatedClustersAnnotation], "local", local != nil)
		}
	}
	if err != nil {
		res = result{reasonError, err.Error()}
	}
	for _, m := range members {
		if r := c.remoteOf(m.link); r != nil && r.setResult(ns, name, &res) {
			c.queue.Add(item{link: m.link}) // its status
		}
	}
	return err
}

// federatedOf is the federated Service of members ns/name: selector-less,
// ClusterIP, with the ports of the first member (this cluster's, else the
// first linked cluster's; members are meant to agree) and the linked
// members' clusters.
func federatedOf(ns, name string, local *corev1.Service, members []member) *corev1.Service {
	from := local
	if from == nil {
		from = members[0].svc
	}
	var ports []corev1.ServicePort
	for _, p := range from.Spec.Ports {
		ports = append(ports, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, AppProtocol: p.AppProtocol})
	}
	clusters := make([]string, 0, len(members))
	for _, m := range members {
		clusters = append(clusters, m.cluster)
	}
	annotations := map[string]string{mc.FederatedClustersAnnotation: strings.Join(slices.Compact(clusters), ",")}
	maps.Copy(annotations, proxyAnnotations(from))
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: federatedName(name), Annotations: annotations, Labels: map[string]string{
			mc.MirroredServiceLabel: "true",
			mc.FederatedLabel:       name,
		}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: ports},
	}
}

// requeueFederated syncs every federated Service again (a Link's watch,
// trust or existence changed).
func (c *Controller) requeueFederated() {
	for _, obj := range c.mirrors.GetStore().List() {
		if svc := obj.(*corev1.Service); svc.Labels[mc.FederatedLabel] != "" {
			c.queue.Add(item{federated: true, ns: svc.Namespace, name: svc.Labels[mc.FederatedLabel]})
		}
	}
}

// federatedMayChange reports whether remote Service ns/name (nil: gone)
// may join or leave a federated Service: it is a member, or one exists.
func (c *Controller) federatedMayChange(ns, name string, remoteSvc *corev1.Service) bool {
	if remoteSvc != nil && federated(remoteSvc) {
		return true
	}
	_, ok, _ := c.mirrors.GetStore().GetByKey(ns + "/" + federatedName(name))
	return ok
}

// unwrapService is obj as a Service, looking inside a deletion tombstone.
func unwrapService(obj any) (*corev1.Service, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	svc, ok := obj.(*corev1.Service)
	return svc, ok
}
