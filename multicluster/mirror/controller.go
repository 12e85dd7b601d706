// Package mirror is the multicluster extension's service mirror. For each
// Link (multicluster.plexus.dev/v1alpha1) in its namespace it watches the
// linked cluster's Services the Link selects (remote-discovery, flat mode)
// and keeps a mirror of each here: a selector-less Service
// <service>-<cluster> in the same namespace, with the remote Service's
// ports and the labels that make destination answer for it with the
// remote pods (control/destination/remote.go). Un-exporting a Service
// deletes its mirror; deleting a Link deletes every mirror it made (a
// finalizer holds the Link until they are gone). A local Service of a
// mirror's name that this Link did not make is never touched: the Link's
// status reports the collision. The status says whether the credentials
// and the remote API server work, and each mirror's state.
package mirror

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/plexus-mesh/plexus/control/kubeclient"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// Finalizer holds a Link until its mirrors are deleted.
const Finalizer = "multicluster.plexus.dev/mirrors"

// Controller mirrors the Links' remote Services.
type Controller struct {
	kube      kubernetes.Interface
	dyn       dynamic.Interface
	namespace string
	log       *slog.Logger
	// NewRemote builds a linked cluster's client from its kubeconfig.
	NewRemote func(kubeconfig []byte) (kubernetes.Interface, error)
	// RenewAt is the fraction of a link token's lifetime after which it
	// is replaced (DefaultRenewAt).
	RenewAt float64
	// TrustRecheck is how often both clusters' anchors are compared
	// (DefaultTrustRecheck).
	TrustRecheck time.Duration

	factory dynamicinformer.DynamicSharedInformerFactory
	links   cache.SharedIndexInformer
	local   informers.SharedInformerFactory
	mirrors cache.SharedIndexInformer // this cluster's mirrors, every Link's, and federated Services
	// members: this cluster's Services exported as federated members
	// (federated.go).
	exports informers.SharedInformerFactory
	members cache.SharedIndexInformer
	queue   workqueue.TypedRateLimitingInterface[item]

	metrics *metrics

	mu      sync.Mutex
	ctx     context.Context
	remotes map[string]*remote // by Link name
}

// item is a unit of work: a Link (ns and name empty), one remote Service
// of a Link's, or (federated) the federated Service of members ns/name.
type item struct {
	link, ns, name string
	federated      bool
}

// New builds a controller for the Links in namespace, its metrics
// registered in reg.
func New(local kubernetes.Interface, dyn dynamic.Interface, namespace string, reg prometheus.Registerer, log *slog.Logger) (*Controller, error) {
	c := &Controller{
		metrics: newMetrics(reg),
		kube:    local, dyn: dyn, namespace: namespace, log: log, RenewAt: DefaultRenewAt, TrustRecheck: DefaultTrustRecheck,
		NewRemote: func(kubeconfig []byte) (kubernetes.Interface, error) {
			return kubeclient.Remote(kubeconfig, "plexus-service-mirror")
		},
		factory: dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, namespace, nil),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[item](100*time.Millisecond, 30*time.Second),
			workqueue.TypedRateLimitingQueueConfig[item]{}),
		remotes: map[string]*remote{},
		local: informers.NewSharedInformerFactoryWithOptions(local, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{mc.MirroredServiceLabel: "true"}.String()
		})),
		exports: informers.NewSharedInformerFactoryWithOptions(local, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = labels.Set{mc.ExportedLabel: mc.ExportedFederated}.String()
		})),
	}
	c.links = c.factory.ForResource(mc.LinkResource).Informer()
	c.mirrors = c.local.Core().V1().Services().Informer()
	c.members = c.exports.Core().V1().Services().Informer()
	// A mirror edited or deleted here is put back as its remote Service
	// says.
	requeue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		svc, ok := obj.(*corev1.Service)
		switch {
		case !ok:
		case svc.Labels[mc.LinkLabel] != "" && svc.Labels[mc.RemoteNameLabel] != "":
			c.queue.Add(item{link: svc.Labels[mc.LinkLabel], ns: svc.Namespace, name: svc.Labels[mc.RemoteNameLabel]})
		case svc.Labels[mc.FederatedLabel] != "":
			c.queue.Add(item{federated: true, ns: svc.Namespace, name: svc.Labels[mc.FederatedLabel]})
		}
	}
	if _, err := c.mirrors.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, obj any) { requeue(obj) }, DeleteFunc: requeue,
	}); err != nil {
		return nil, fmt.Errorf("watching mirrors: %w", err)
	}
	// This cluster's member of a federated Service changes it.
	member := func(obj any) {
		if svc, ok := unwrapService(obj); ok {
			c.queue.Add(item{federated: true, ns: svc.Namespace, name: svc.Name})
		}
	}
	if _, err := c.members.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: member, UpdateFunc: func(_, obj any) { member(obj) }, DeleteFunc: member,
	}); err != nil {
		return nil, fmt.Errorf("watching federated members: %w", err)
	}
	enqueue := func(obj any) {
		if u, ok := obj.(*unstructured.Unstructured); ok {
			c.queue.Add(item{link: u.GetName()})
		} else if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			if u, ok := tomb.Obj.(*unstructured.Unstructured); ok {
				c.queue.Add(item{link: u.GetName()})
			}
		}
	}
	if _, err := c.links.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return nil, fmt.Errorf("watching Links: %w", err)
	}
	return c, nil
}

// Ready returns nil once the Links' and mirrors' caches have synced.
func (c *Controller) Ready() error {
	if !c.links.HasSynced() || !c.mirrors.HasSynced() || !c.members.HasSynced() {
		return errors.New("the Links', mirrors' and federated members' caches have not synced")
	}
	return nil
}

// Run watches the Links and mirrors their Services until ctx ends.
func (c *Controller) Run(ctx context.Context) error {
	c.mu.Lock()
	c.ctx = ctx
	c.mu.Unlock()
	c.factory.Start(ctx.Done())
	c.local.Start(ctx.Done())
	c.exports.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), c.links.HasSynced, c.mirrors.HasSynced, c.members.HasSynced) {
		return fmt.Errorf("the Link and mirror caches did not sync: %w", context.Cause(ctx))
	}
	c.log.Info("service mirror running", "namespace", c.namespace)
	go func() {
		<-ctx.Done()
		c.queue.ShutDown()
	}()
	for {
		it, shutdown := c.queue.Get()
		if shutdown {
			break
		}
		err := c.sync(ctx, it)
		switch {
		case err == nil:
			c.queue.Forget(it)
		case ctx.Err() == nil:
			c.log.Warn("mirroring failed; retrying", "link", it.link, "service", it.ns+"/"+it.name, "error", err)
			c.queue.AddRateLimited(it)
		}
		c.queue.Done(it)
	}
	c.mu.Lock()
	for _, r := range c.remotes {
		r.cancel()
	}
	c.mu.Unlock()
	c.factory.Shutdown()
	c.local.Shutdown()
	c.exports.Shutdown()
	return nil
}

func (c *Controller) sync(ctx context.Context, it item) error {
	if it.federated {
		return c.syncFederated(ctx, it.ns, it.name)
	}
	if it.name != "" {
		return c.syncMirror(ctx, it)
	}
	return c.syncLink(ctx, it.link)
}

// link is the Link name from the cache, nil when gone.
func (c *Controller) link(name string) (*mc.Link, *unstructured.Unstructured, error) {
	obj, ok, err := c.links.GetStore().GetByKey(c.namespace + "/" + name)
	if err != nil || !ok {
		return nil, nil, err
	}
	u := obj.(*unstructured.Unstructured)
	l, err := mc.DecodeLink(u)
	return l, u, err
}

// syncLink keeps Link name's finalizer, remote watch, stale mirrors and
// status in order, or, once it is being deleted, deletes its mirrors and
// lets it go.
func (c *Controller) syncLink(ctx context.Context, name string) error {
	l, u, err := c.link(name)
	if err != nil {
		return err
	}
	if l == nil {
		c.stopRemote(name)
		c.metrics.forget(name)
		return nil
	}
	if l.DeletionTimestamp != nil {
		c.stopRemote(name)
		if err := c.deleteMirrors(ctx, name, nil); err != nil {
			return err
		}
		return c.setFinalizer(ctx, u, false)
	}
	if err := c.setFinalizer(ctx, u, true); err != nil {
		return err
	}
	r, credErr := c.ensureRemote(ctx, l)
	if r != nil && credErr == nil && r.synced() {
		refused := r.trust.refused
		c.checkTrust(ctx, l, r, time.Now())
		if r.trust.refused != refused {
			c.requeueFederated() // its members join or leave
		}
		if r.trust.refused && !r.trust.withdrawn {
			if err := c.deleteMirrors(ctx, name, nil); err != nil {
				return err
			}
			r.trust.withdrawn = true
		}
	}
	if r != nil && r.needsCollect() {
		// Once per watch: mirrors of Services un-exported while
		// nobody watched. Later un-exports come one by one.
		if err := c.deleteMirrors(ctx, name, r.exported); err != nil {
			return err
		}
		r.collected()
	}
	if r != nil && credErr == nil && r.synced() && r.tokenOK && c.nextOf(r) == nil {
		if at := r.token.renewAt(c.RenewAt); time.Now().Before(at) {
			c.queue.AddAfter(item{link: name}, time.Until(at))
		} else if err := c.renewCredentials(ctx, l, r); err != nil {
			c.metrics.renewals.WithLabelValues(name, "error").Inc()
			c.log.Warn("renewing a link's token failed; retrying", "link", name, "error", err, "expires in", expiresIn(r.token, time.Now()))
			c.queue.AddAfter(item{link: name}, 30*time.Second)
		} else {
			c.metrics.renewals.WithLabelValues(name, "ok").Inc()
			c.queue.Add(item{link: name}) // to watch with it
		}
	}
	st := linkStatus(l, r, c.nextOf(r), credErr, time.Now())
	c.metrics.observe(l, st, r)
	return c.writeStatus(ctx, u, st)
}

// setFinalizer adds (on) or removes the finalizer of u, if needed.
func (c *Controller) setFinalizer(ctx context.Context, u *unstructured.Unstructured, on bool) error {
	fins := u.GetFinalizers()
	has := false
	var kept []string
	for _, f := range fins {
		if f == Finalizer {
			has = true
			continue
		}
		kept = append(kept, f)
	}
	if has == on {
		return nil
	}
	if on {
		kept = append(kept, Finalizer)
	}
	patch := map[string]any{"metadata": map[string]any{"finalizers": kept, "resourceVersion": u.GetResourceVersion()}}
	_, err := c.dyn.Resource(mc.LinkResource).Namespace(c.namespace).Patch(ctx, u.GetName(), "application/merge-patch+json", mustJSON(patch), metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// writeStatus writes status to u's status subresource if it differs.
func (c *Controller) writeStatus(ctx context.Context, u *unstructured.Unstructured, status mc.LinkStatus) error {
	old, _ := mc.DecodeLink(u)
	if old != nil && statusEqual(old.Status, status) {
		return nil
	}
	raw, err := toUnstructured(status)
	if err != nil {
		return err
	}
	u = u.DeepCopy()
	u.Object["status"] = raw
	_, err = c.dyn.Resource(mc.LinkResource).Namespace(c.namespace).UpdateStatus(ctx, u, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // a newer Link comes with its own event
	}
	return err
}

// hashOf identifies what a remote watch is built from.
func hashOf(kubeconfig []byte, l *mc.Link) [sha256.Size]byte {
	sel := ""
	if l.Spec.RemoteDiscoverySelector != nil {
		sel = metav1.FormatLabelSelector(l.Spec.RemoteDiscoverySelector)
	}
	return sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s", l.Spec.ClusterName, sel, kubeconfig))
}
