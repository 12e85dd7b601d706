package repair

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// Retry backoff of a pod whose check or repair failed; the resync checks
// it again meanwhile anyway.
const (
	retryFirst = time.Second
	retryMax   = 5 * time.Minute
)

// Run watches the pods bound to cfg.Node (a field selector on
// spec.nodeName: the agent never lists other nodes' pods) and checks each
// meshed one when it is added or changes, and every cfg.Resync, until ctx
// ends. Informer handlers only queue pod keys; workers do the checks.
func Run(ctx context.Context, cfg Config, deps Deps) error {
	r, err := New(cfg, deps)
	if err != nil {
		return err
	}
	cfg = r.cfg
	factory := deps.Factory
	if factory == nil {
		factory = NodeFactory(deps.Client, cfg.Node, cfg.Resync)
	}
	pods := factory.Core().V1().Pods()
	informer, lister := pods.Informer(), pods.Lister()
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](retryFirst, retryMax),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "plexus-node-repair"})
	defer queue.ShutDown()

	enqueue := func(obj any) {
		pod, ok := obj.(*corev1.Pod)
		if !ok || !meshpod.IsMeshed(pod) {
			return
		}
		if key, err := cache.MetaNamespaceKeyFunc(pod); err == nil {
			queue.Add(key)
		}
	}
	_, err = informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) }, // also every resync
		DeleteFunc: func(obj any) {
			if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tomb.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				r.Forget(pod.UID)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	deps.Log.Info("repair: watching meshed pods on the node", "node", cfg.Node, "mode", string(cfg.Mode), "resync", cfg.Resync)
	if !cache.WaitForCacheSync(ctx.Done(), informer.HasSynced) {
		return ctx.Err()
	}
	done := make(chan struct{})
	for range cfg.Workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for r.next(ctx, queue, lister) {
			}
		}()
	}
	<-ctx.Done()
	queue.ShutDown()
	for range cfg.Workers {
		<-done
	}
	return nil
}

// NodeFactory is the informer factory for the pods bound to node (a field
// selector on spec.nodeName: the agent never lists other nodes' pods),
// resynced every resync. The agent shares it between the repair and the
// plugin's pod lookups (daemonset/podlookup), so the node has one watch.
func NodeFactory(client kubernetes.Interface, node string, resync time.Duration) informers.SharedInformerFactory {
	return informers.NewSharedInformerFactoryWithOptions(client, resync,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
		}))
}

// next processes one queued pod; false when the queue is shut down.
func (r *Repairer) next(ctx context.Context, queue workqueue.TypedRateLimitingInterface[string], pods listersv1.PodLister) bool {
	key, quit := queue.Get()
	if quit {
		return false
	}
	defer queue.Done(key)
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		queue.Forget(key)
		return true
	}
	pod, err := pods.Pods(ns).Get(name)
	if apierrors.IsNotFound(err) {
		queue.Forget(key)
		return true
	}
	if err != nil {
		queue.AddRateLimited(key)
		return true
	}
	// The cache's object is shared: Sync never changes it.
	if _, err := r.Sync(ctx, pod); err != nil {
		if ctx.Err() == nil {
			r.Failed(ctx, pod, err)
			queue.AddRateLimited(key)
		}
		return true
	}
	queue.Forget(key)
	return true
}
