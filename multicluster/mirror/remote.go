package mirror

import (
	"context"
	"crypto/sha256"
	"fmt"
	"strings"
	"sync"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// remote is one Link's watch of its cluster's selected Services.
type remote struct {
	hash     [sha256.Size]byte
	client   kubernetes.Interface
	token    linkToken // its credentials' token, when a bound one (tokenOK)
	tokenOK  bool
	services corelisters.ServiceLister
	// slices are the remote EndpointSlices, read for headless Services
	// (headless.go) once slicesSynced; synced is the Services' alone (a
	// headless mirror's slice follows as the slices arrive).
	slices       discoverylisters.EndpointSliceLister
	slicesSynced func() bool
	synced       func() bool
	cancel       context.CancelFunc
	// next replaces this watch once it has synced (new credentials, a
	// renewed token, another selector), so that the Link never shows a
	// resync; nil when none is under way. Guarded by Controller.mu.
	next *remote

	mu       sync.Mutex
	results  map[string]*result // by remote ns/name: the last sync's
	watchErr error              // the last list or watch error; nil once one succeeds
	errSince time.Time
	// trust is the last comparison of both clusters' anchors, at
	// trustAt (zero: not yet).
	trust   trustState
	trustAt time.Time
	// collectedDone: the mirrors this watch's first list no longer
	// selects were deleted. After that the informer reports every
	// un-export, also those it finds relisting after an outage.
	collectedDone bool
}

// credentialsError is why a Link's credentials cannot be used.
type credentialsError struct{ reason, message string }

func (e *credentialsError) Error() string { return e.message }

// ensureRemote starts (or restarts, when its credentials or selector
// changed) Link l's watch of its cluster, and returns it; a credentials
// error leaves the running watch (if any) as it is.
func (c *Controller) ensureRemote(ctx context.Context, l *mc.Link) (*remote, *credentialsError) {
	secret, err := c.kube.CoreV1().Secrets(c.namespace).Get(ctx, l.Spec.CredentialsSecret, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return c.remoteOf(l.Name), &credentialsError{"Missing", fmt.Sprintf("Secret %s/%s does not exist", c.namespace, l.Spec.CredentialsSecret)}
	case err != nil:
		return c.remoteOf(l.Name), &credentialsError{"Unreadable", fmt.Sprintf("reading Secret %s/%s: %v", c.namespace, l.Spec.CredentialsSecret, err)}
	case secret.Type != mc.CredentialsSecretType || len(secret.Data[mc.CredentialsKey]) == 0:
		return c.remoteOf(l.Name), &credentialsError{"Malformed", fmt.Sprintf("Secret %s/%s is not of type %s with key %s", c.namespace, l.Spec.CredentialsSecret, mc.CredentialsSecretType, mc.CredentialsKey)}
	}
	kubeconfig := secret.Data[mc.CredentialsKey]
	hash := hashOf(kubeconfig, l)
	cur := c.remoteOf(l.Name)
	if cur != nil && cur.hash == hash {
		return cur, nil
	}
	if next := c.nextOf(cur); next != nil && next.hash == hash {
		return cur, nil // its replacement is syncing
	}
	client, err := c.NewRemote(kubeconfig)
	if err != nil {
		return c.remoteOf(l.Name), &credentialsError{"Malformed", fmt.Sprintf("Secret %s/%s: kubeconfig: %v", c.namespace, l.Spec.CredentialsSecret, err)}
	}
	if missing := missingRights(ctx, client); len(missing) > 0 {
		// Checked again later: the rights may be granted.
		c.queue.AddAfter(item{link: l.Name}, rightsRecheck)
		return c.remoteOf(l.Name), &credentialsError{"Forbidden", fmt.Sprintf("the credentials in Secret %s/%s may not %s in the remote cluster",
			c.namespace, l.Spec.CredentialsSecret, strings.Join(missing, ", "))}
	}
	sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{
		Key: mc.ExportedLabel, Operator: metav1.LabelSelectorOpIn, Values: []string{mc.ExportedRemoteDiscovery, mc.ExportedGateway, mc.ExportedFederated},
	}}}
	if l.Spec.RemoteDiscoverySelector != nil {
		sel = l.Spec.RemoteDiscoverySelector
	}
	selector, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		return c.remoteOf(l.Name), &credentialsError{"InvalidSelector", fmt.Sprintf("remoteDiscoverySelector: %v", err)}
	}
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = selector.String()
	}))
	inf := factory.Core().V1().Services().Informer()
	sliceFactory := informers.NewSharedInformerFactory(client, 0)
	sliceInf := sliceFactory.Discovery().V1().EndpointSlices().Informer()
	r := &remote{hash: hash, client: client, services: factory.Core().V1().Services().Lister(),
		slices: sliceFactory.Discovery().V1().EndpointSlices().Lister(), slicesSynced: sliceInf.HasSynced,
		synced: inf.HasSynced, results: map[string]*result{}}
	r.token, r.tokenOK = parseLinkToken(kubeconfig)
	name := l.Name
	enqueue := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		if svc, ok := obj.(*corev1.Service); ok {
			c.queue.Add(item{link: name, ns: svc.Namespace, name: svc.Name})
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: enqueue,
	}); err != nil {
		return c.remoteOf(l.Name), &credentialsError{"Error", err.Error()}
	}
	// A slice of an exported headless Service changes its mirror's slice.
	enqueueSlice := func(obj any) {
		if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj = tomb.Obj
		}
		s, ok := obj.(*discoveryv1.EndpointSlice)
		if !ok {
			return
		}
		if svc, err := r.services.Services(s.Namespace).Get(s.Labels[discoveryv1.LabelServiceName]); err == nil && headless(svc) {
			c.queue.Add(item{link: name, ns: svc.Namespace, name: svc.Name})
		}
	}
	if _, err := sliceInf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueueSlice, UpdateFunc: func(_, obj any) { enqueueSlice(obj) }, DeleteFunc: enqueueSlice,
	}); err != nil {
		return c.remoteOf(l.Name), &credentialsError{"Error", err.Error()}
	}
	_ = inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		c.metrics.watchErrors.WithLabelValues(name).Inc()
		r.setWatchErr(err)
		c.queue.AddAfter(item{link: name}, unreachableAfter+time.Second) // to say so once it lasts
	})
	c.mu.Lock()
	rctx, cancel := context.WithCancel(c.ctx)
	r.cancel = cancel
	old := c.remotes[name]
	switch {
	case old != nil && old.synced():
		// The running watch serves until this one has synced.
		if old.next != nil {
			old.next.cancel()
		}
		old.next = r
	case old != nil:
		old.cancel()
		c.remotes[name] = r
	default:
		c.remotes[name] = r
	}
	c.mu.Unlock()
	factory.Start(rctx.Done())
	sliceFactory.Start(rctx.Done())
	go func() {
		if cache.WaitForCacheSync(rctx.Done(), inf.HasSynced) {
			r.setWatchErr(nil)
			c.mu.Lock()
			if cur := c.remotes[name]; cur != nil && cur.next == r {
				cur.cancel()
				c.remotes[name] = r
			}
			c.mu.Unlock()
			c.queue.Add(item{link: name}) // stale mirrors, status
			c.requeueFederated()          // members it no longer exports
		}
	}()
	go func() {
		<-rctx.Done()
		factory.Shutdown()
		sliceFactory.Shutdown()
	}()
	c.log.Info("watching linked cluster", "link", name, "cluster", l.Spec.ClusterName, "selector", selector.String(), "replacing", old != nil)
	// A remote that never answers is reported once that lasts.
	c.queue.AddAfter(item{link: name}, unreachableAfter+time.Second)
	return c.remoteOf(name), nil
}

// nextOf is r's replacement under way, if any.
func (c *Controller) nextOf(r *remote) *remote {
	if r == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return r.next
}

// neededRights are what the linked cluster must grant: the service
// mirror watches Services, destination Services, EndpointSlices and Pods.
var neededRights = []authorizationv1.ResourceAttributes{
	{Verb: "list", Resource: "services"}, {Verb: "watch", Resource: "services"},
	{Verb: "list", Group: "discovery.k8s.io", Resource: "endpointslices"}, {Verb: "watch", Group: "discovery.k8s.io", Resource: "endpointslices"},
	{Verb: "list", Resource: "pods"}, {Verb: "watch", Resource: "pods"},
}

// rightsRecheck is how often credentials lacking rights are checked again.
const rightsRecheck = 30 * time.Second

// missingRights asks the remote API server which of neededRights the
// credentials lack ("list pods", ...). A question it does not answer
// counts as granted: the watch then says what fails.
func missingRights(ctx context.Context, client kubernetes.Interface) []string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	var missing []string
	for _, r := range neededRights {
		review, err := client.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx,
			&authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &r}}, metav1.CreateOptions{})
		if err != nil {
			return missing // unanswered: one hung question is enough
		}
		if !review.Status.Allowed {
			missing = append(missing, r.Verb+" "+r.Resource)
		}
	}
	return missing
}

// unreachableAfter is how long a remote API server may fail (or not
// sync) before the Link says it is unreachable.
const unreachableAfter = 10 * time.Second

func (r *remote) setWatchErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err == nil {
		r.watchErr = nil
		return
	}
	if r.watchErr == nil {
		r.errSince = time.Now()
	}
	r.watchErr = err
}

// unreachable is the remote API server's error once it lasted
// unreachableAfter, else nil.
func (r *remote) unreachable(now time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watchErr != nil && now.Sub(r.errSince) >= unreachableAfter {
		return r.watchErr
	}
	return nil
}

// needsCollect reports whether the watch has synced and the mirrors it
// does not select are still to be collected.
func (r *remote) needsCollect() bool {
	if !r.synced() {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.collectedDone
}

// collected records that they were.
func (r *remote) collected() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.collectedDone = true
}

// setResult records remote Service ns/name's result (nil: none) and
// reports whether it changed.
func (r *remote) setResult(ns, name string, res *result) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	old, had := r.results[ns+"/"+name]
	if res == nil {
		delete(r.results, ns+"/"+name)
		return had
	}
	r.results[ns+"/"+name] = res
	return !had || *old != *res
}

// exported reports whether remote Service ns/name is selected and not
// federated (its mirror stays).
func (r *remote) exported(ns, name string) bool {
	svc, err := r.services.Services(ns).Get(name)
	return err == nil && !federated(svc)
}

func (c *Controller) remoteOf(link string) *remote {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.remotes[link]
}

func (c *Controller) stopRemote(link string) {
	c.mu.Lock()
	r := c.remotes[link]
	if r != nil {
		r.cancel()
		if r.next != nil {
			r.next.cancel()
		}
		delete(c.remotes, link)
	}
	c.mu.Unlock()
	if r != nil {
		c.requeueFederated() // its members leave
	}
}
