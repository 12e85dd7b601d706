package mirror

// A remote Service's mirror: what it is (mirrorOf), and how the
// controller writes it (syncMirror, applyMirror) and deletes it
// (deleteMirrors, deleteMirror).

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// mirrorOf is the mirror of remote Service svc for Link l (in gateway mode
// when svc is exported so: GatewayLabel): selector-less,
// ClusterIP, the remote ports (node ports dropped), and the labels that
// say what it mirrors. Of what the remote cluster wrote it copies only
// what cannot change how this cluster treats the mirror: labels but the
// extension's own (no re-export) and Kubernetes' (service-proxy-name would
// hide it from kube-proxy), and the Plexus proxy configuration
// annotations (opaque ports); not zone-aware balancing (the other
// cluster's zones mean nothing here) nor any other annotation.
func mirrorOf(l *mc.Link, svc *corev1.Service, name string) *corev1.Service {
	lbls := map[string]string{}
	for k, v := range svc.Labels {
		if !extensionKey(k) && !kubernetesKey(k) {
			lbls[k] = v
		}
	}
	maps.Copy(lbls, map[string]string{
		mc.MirroredServiceLabel: "true",
		mc.ClusterNameLabel:     l.Spec.ClusterName,
		mc.LinkLabel:            l.Name,
		mc.RemoteNameLabel:      svc.Name,
		mc.RemoteDiscoveryLabel: l.Spec.ClusterName,
	})
	if svc.Labels[mc.ExportedLabel] == mc.ExportedGateway {
		lbls[mc.GatewayLabel] = l.Spec.ClusterName
	}
	annotations := proxyAnnotations(svc)
	var ports []corev1.ServicePort
	for _, p := range svc.Spec.Ports {
		ports = append(ports, corev1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, AppProtocol: p.AppProtocol})
	}
	m := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: svc.Namespace, Name: name, Labels: lbls, Annotations: annotations},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Ports: ports},
	}
	if mirroredHeadless(svc) {
		m.Spec.ClusterIP = corev1.ClusterIPNone // headless.go
	}
	return m
}

// proxyAnnotations are svc's Plexus proxy configuration annotations
// (opaque ports), which a mirror keeps.
func proxyAnnotations(svc *corev1.Service) map[string]string {
	out := map[string]string{}
	for k, v := range svc.Annotations {
		if strings.HasPrefix(k, podcontract.AnnotationPrefix) {
			out[k] = v
		}
	}
	return out
}

// extensionKey reports whether a label or annotation key is the
// extension's, never copied onto a mirror.
func extensionKey(k string) bool {
	return strings.HasPrefix(k, "mirror.plexus.dev/") || strings.HasPrefix(k, "multicluster.plexus.dev/")
}

// kubernetesKey reports whether a label key is in one of Kubernetes' own
// prefixes (kubernetes.io, k8s.io and their subdomains).
func kubernetesKey(k string) bool {
	prefix, _, ok := strings.Cut(k, "/")
	return ok && (prefix == "kubernetes.io" || prefix == "k8s.io" || strings.HasSuffix(prefix, ".kubernetes.io") || strings.HasSuffix(prefix, ".k8s.io"))
}

// sameMirror reports whether cur already is want, as far as the mirror
// decides (the API server fills in the rest).
func sameMirror(cur, want *corev1.Service) bool {
	if !maps.Equal(cur.Labels, want.Labels) || !maps.Equal(nonNil(cur.Annotations), want.Annotations) || len(cur.Spec.Ports) != len(want.Spec.Ports) {
		return false
	}
	for i, p := range cur.Spec.Ports {
		w := want.Spec.Ports[i]
		if p.Name != w.Name || p.Port != w.Port || p.Protocol != w.Protocol || !reflect.DeepEqual(p.AppProtocol, w.AppProtocol) {
			return false
		}
	}
	return true
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// deleteMirrors deletes Link name's mirrors whose remote Service keep
// does not report exported (every one when keep is nil).
func (c *Controller) deleteMirrors(ctx context.Context, name string, keep func(ns, name string) bool) error {
	list, err := c.kube.CoreV1().Services("").List(ctx, metav1.ListOptions{
		LabelSelector: labels.Set{mc.LinkLabel: name}.String()})
	if err != nil {
		return fmt.Errorf("listing Link %s's mirrors: %w", name, err)
	}
	var errs []error
	for _, svc := range list.Items {
		if keep != nil && keep(svc.Namespace, svc.Labels[mc.RemoteNameLabel]) {
			continue
		}
		errs = append(errs, c.deleteService(ctx, name, &svc))
	}
	return errors.Join(errs...)
}

// deleteMirror deletes the mirror mirrorName of remote Service ns/remoteName,
// if it is Link link's mirror of that Service; anything else of that name
// stays.
func (c *Controller) deleteMirror(ctx context.Context, link, ns, remoteName, mirrorName string) error {
	svc, err := c.kube.CoreV1().Services(ns).Get(ctx, mirrorName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if svc.Labels[mc.LinkLabel] != link || svc.Labels[mc.RemoteNameLabel] != remoteName {
		return nil
	}
	return c.deleteService(ctx, link, svc)
}

// deleteService deletes svc, Link link's mirror, unless it was replaced.
func (c *Controller) deleteService(ctx context.Context, link string, svc *corev1.Service) error {
	uid := svc.UID
	err := c.kube.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return err
	}
	c.log.Info("mirror deleted", "link", link, "mirror", svc.Namespace+"/"+svc.Name)
	return nil
}

// syncMirror creates, updates or deletes the mirror of one remote Service.
func (c *Controller) syncMirror(ctx context.Context, it item) error {
	l, _, err := c.link(it.link)
	if err != nil || l == nil || l.DeletionTimestamp != nil {
		return err
	}
	r := c.remoteOf(it.link)
	if r == nil || !r.synced() {
		return nil // the Link's sync comes once it has
	}
	mirrorName := it.name + "-" + l.Spec.ClusterName
	if r.trust.refused {
		r.setResult(it.ns, it.name, &result{reasonRefused, "the Link is refused: " + r.trust.message})
		c.queue.Add(item{link: it.link})
		return c.deleteMirror(ctx, it.link, it.ns, it.name, mirrorName)
	}
	remoteSvc, err := r.services.Services(it.ns).Get(it.name)
	if c.federatedMayChange(it.ns, it.name, remoteSvc) {
		c.queue.Add(item{federated: true, ns: it.ns, name: it.name})
	}
	if err == nil && federated(remoteSvc) {
		// A member is mirrored only as part of the federated Service.
		return c.deleteMirror(ctx, it.link, it.ns, it.name, mirrorName)
	}
	if apierrors.IsNotFound(err) {
		r.setResult(it.ns, it.name, nil)
		c.queue.Add(item{link: it.link})
		return c.deleteMirror(ctx, it.link, it.ns, it.name, mirrorName)
	}
	if err != nil {
		return err
	}
	res, m := c.applyMirror(ctx, l, remoteSvc, mirrorName)
	if m != nil && headless(m) && r.slicesSynced() {
		// (Before the slices have synced, their arrival brings it back.)
		if err := c.syncSlice(ctx, l, r, remoteSvc, m); err != nil {
			res = result{reasonError, fmt.Sprintf("the headless mirror's EndpointSlice: %v", err)}
		}
	}
	r.setResult(it.ns, it.name, &res)
	c.queue.Add(item{link: it.link}) // its status
	if res.reason == reasonError {
		return errors.New(res.message)
	}
	return nil
}

// applyMirror makes the local mirror match the remote Service, and
// returns it (nil unless it is this Link's).
func (c *Controller) applyMirror(ctx context.Context, l *mc.Link, remoteSvc *corev1.Service, mirrorName string) (result, *corev1.Service) {
	want := mirrorOf(l, remoteSvc, mirrorName)
	services := c.kube.CoreV1().Services(remoteSvc.Namespace)
	cur, err := services.Get(ctx, mirrorName, metav1.GetOptions{})
	if err == nil && cur.Labels[mc.LinkLabel] == l.Name && headless(cur) != headless(want) {
		// A Service's ClusterIP cannot change: a new mirror replaces it.
		if err = c.deleteService(ctx, l.Name, cur); err == nil {
			err = apierrors.NewNotFound(corev1.Resource("services"), mirrorName)
		}
	}
	switch {
	case apierrors.IsNotFound(err):
		cur, err = services.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsNotFound(err) {
			return result{reasonMissingNamespace, fmt.Sprintf("namespace %s does not exist here", remoteSvc.Namespace)}, nil
		}
		if err == nil {
			c.log.Info("mirror created", "link", l.Name, "mirror", remoteSvc.Namespace+"/"+mirrorName)
		}
	case err != nil:
	case cur.Labels[mc.LinkLabel] != l.Name:
		return result{reasonNameCollision, fmt.Sprintf("Service %s/%s exists and is not this Link's mirror", remoteSvc.Namespace, mirrorName)}, nil
	case !sameMirror(cur, want):
		cur.Labels, cur.Annotations, cur.Spec.Ports = want.Labels, want.Annotations, want.Spec.Ports
		cur, err = services.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return result{reasonError, err.Error()}, nil
	}
	return result{reasonMirrored, ""}, cur
}
