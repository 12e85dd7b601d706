package mirror

// Headless Services and StatefulSets (issue 27 T9), flat mode: the mirror
// of a headless Service is headless too, and the service mirror keeps one
// EndpointSlice for it, owned by it (the API server's garbage collector
// deletes it with the mirror), listing the remote endpoints at their own
// addresses with their hostnames. So <pod>.<service>-<cluster>.<ns>.svc
// resolves here (the cluster's DNS reads the slice) to the remote pod,
// which this cluster's pods reach directly in flat mode; destination
// answers for that address with the remote pod's identity
// (control/destination/remote.go). In gateway mode a headless Service is
// mirrored as a ClusterIP Service (its pods are not addressable here).

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// headless reports whether svc is headless.
func headless(svc *corev1.Service) bool { return svc.Spec.ClusterIP == corev1.ClusterIPNone }

// mirroredHeadless reports whether svc's mirror is headless: svc is, and
// is exported flat.
func mirroredHeadless(svc *corev1.Service) bool {
	return headless(svc) && svc.Labels[mc.ExportedLabel] != mc.ExportedGateway
}

// sliceOf is the EndpointSlice of headless mirror m of Link l: the
// endpoints of the remote slices of one address family (IPv4 where there
// are both), ready or serving ones, each address once, hostnames kept.
func sliceOf(l *mc.Link, m *corev1.Service, remote []*discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	family := discoveryv1.AddressTypeIPv4
	if !slices.ContainsFunc(remote, func(s *discoveryv1.EndpointSlice) bool { return s.AddressType == family }) {
		family = discoveryv1.AddressTypeIPv6
	}
	slices.SortFunc(remote, func(a, b *discoveryv1.EndpointSlice) int { return strings.Compare(a.Name, b.Name) })
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: m.Namespace, Name: m.Name,
			Labels: map[string]string{
				discoveryv1.LabelServiceName: m.Name,
				discoveryv1.LabelManagedBy:   mc.MirrorSliceManager,
				mc.LinkLabel:                 l.Name,
				mc.ClusterNameLabel:          l.Spec.ClusterName,
			},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: m.Name, UID: m.UID}},
		},
		AddressType: family,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	seen := map[string]bool{}
	for _, s := range remote {
		if s.AddressType != family {
			continue
		}
		if want.Ports == nil {
			want.Ports = s.Ports
		}
		for _, ep := range s.Endpoints {
			if len(ep.Addresses) == 0 || seen[ep.Addresses[0]] {
				continue
			}
			seen[ep.Addresses[0]] = true
			want.Endpoints = append(want.Endpoints, discoveryv1.Endpoint{
				Addresses: ep.Addresses[:1], Hostname: ep.Hostname, Conditions: ep.Conditions,
			})
		}
	}
	return want
}

// syncSlice makes headless mirror m's EndpointSlice match the remote
// Service's endpoints; a slice of that name it did not make is left alone.
func (c *Controller) syncSlice(ctx context.Context, l *mc.Link, r *remote, remoteSvc, m *corev1.Service) error {
	remote, err := r.slices.EndpointSlices(remoteSvc.Namespace).List(labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: remoteSvc.Name}))
	if err != nil {
		return err
	}
	want := sliceOf(l, m, remote)
	api := c.kube.DiscoveryV1().EndpointSlices(m.Namespace)
	cur, err := api.Get(ctx, m.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
		return err
	case err != nil:
		return err
	case cur.Labels[discoveryv1.LabelManagedBy] != mc.MirrorSliceManager:
		return fmt.Errorf("EndpointSlice %s/%s exists and is not this mirror's", m.Namespace, m.Name)
	case cur.AddressType != want.AddressType:
		uid := cur.UID
		if err := api.Delete(ctx, cur.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		_, err = api.Create(ctx, want, metav1.CreateOptions{})
		return err
	case maps.Equal(cur.Labels, want.Labels) && reflect.DeepEqual(cur.OwnerReferences, want.OwnerReferences) &&
		reflect.DeepEqual(cur.Endpoints, want.Endpoints) && reflect.DeepEqual(cur.Ports, want.Ports):
		return nil
	}
	cur.Labels, cur.OwnerReferences, cur.Endpoints, cur.Ports = want.Labels, want.OwnerReferences, want.Endpoints, want.Ports
	_, err = api.Update(ctx, cur, metav1.UpdateOptions{})
	return err
}
