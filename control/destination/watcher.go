package destination

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"

	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// Informer index names.
const (
	indexClusterIP = "clusterIP" // services by each ClusterIP
	indexService   = "service"   // EndpointSlices by <ns>/<service>
	indexPod       = "pod"       // EndpointSlices by <ns>/<pod> of each endpoint's targetRef
	indexPodIP     = "podIP"     // pods (not host-network) by each pod IP
)

// key names what a work item recomputes: the publishers of service
// Namespace/Name, or (IP valid) those of a pod IP.
type key struct {
	Namespace, Name string
	IP              netip.Addr
}

// pubKey names one publisher.
type pubKey struct {
	key
	Port uint16
}

// watcher keeps the informers and the publishers that have streams.
type watcher struct {
	cfg Config
	log *slog.Logger
	// cluster is the Link's name of the linked cluster watched; "" for
	// this one. Its endpoints carry it (label "cluster"), and the proxies'
	// metrics with them (dst_cluster).
	cluster string

	factory  informers.SharedInformerFactory
	services cache.SharedIndexInformer
	slices   cache.SharedIndexInformer
	pods     cache.SharedIndexInformer
	nodes    cache.SharedIndexInformer // for the zone of a client's node
	svcList  corelisters.ServiceLister
	podList  corelisters.PodLister
	nodeList corelisters.NodeLister
	queue    workqueue.TypedInterface[key]

	// serviceChanged, when set, is told of every Service change (the outbound
	// policies depend on Services and their annotations). It must not
	// block.
	serviceChanged func()

	// remote answers for remote-discovery mirrors (remote.go); nil when
	// off, and in a remote cluster's watcher.
	remote *remoteClusters

	mu   sync.Mutex
	pubs map[key]map[uint16]*publisher
}

// newWatcher is the local cluster's watcher.
func newWatcher(cfg Config, client kubernetes.Interface, log *slog.Logger) (*watcher, error) {
	return newClusterWatcher(cfg, client, log, true)
}

// newClusterWatcher watches the cluster of client, and its Nodes when
// nodes (the local cluster's: the zones of clients).
func newClusterWatcher(cfg Config, client kubernetes.Interface, log *slog.Logger, nodes bool) (*watcher, error) {
	// Drop managedFields before objects enter the caches, and a Node's
	// status (its image list): they are large and never read.
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTransform(func(obj any) (any, error) {
		if o, ok := obj.(metav1.Object); ok {
			o.SetManagedFields(nil)
		}
		if n, ok := obj.(*corev1.Node); ok {
			n.Status = corev1.NodeStatus{}
		}
		return obj, nil
	}))
	w := &watcher{
		cfg:      cfg,
		log:      log,
		factory:  factory,
		services: factory.Core().V1().Services().Informer(),
		slices:   factory.Discovery().V1().EndpointSlices().Informer(),
		pods:     factory.Core().V1().Pods().Informer(),
		svcList:  factory.Core().V1().Services().Lister(),
		podList:  factory.Core().V1().Pods().Lister(),
		queue:    workqueue.NewTyped[key](),
		pubs:     map[key]map[uint16]*publisher{},
	}
	if nodes {
		w.nodes = factory.Core().V1().Nodes().Informer()
		w.nodeList = factory.Core().V1().Nodes().Lister()
		w.queue = workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[key]{Name: "plexus-destination"})
	}
	if err := w.services.AddIndexers(cache.Indexers{indexClusterIP: indexServiceIPs}); err != nil {
		return nil, fmt.Errorf("adding service indexers: %w", err)
	}
	if err := w.slices.AddIndexers(cache.Indexers{indexService: indexSliceService, indexPod: indexSlicePods}); err != nil {
		return nil, fmt.Errorf("adding EndpointSlice indexers: %w", err)
	}
	if err := w.pods.AddIndexers(cache.Indexers{indexPodIP: indexPodIPs}); err != nil {
		return nil, fmt.Errorf("adding pod indexers: %w", err)
	}
	// The handlers only read the caches and add keys to the queue: they
	// never wait for a publisher or a stream.
	for name, h := range map[string]struct {
		inf cache.SharedIndexInformer
		fn  func(oldObj, newObj any)
	}{"service": {w.services, w.onService}, "EndpointSlice": {w.slices, w.onSlice}, "pod": {w.pods, w.onPod}} {
		if _, err := h.inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { h.fn(nil, obj) },
			UpdateFunc: h.fn,
			DeleteFunc: func(obj any) { h.fn(obj, nil) },
		}); err != nil {
			return nil, fmt.Errorf("adding %s handler: %w", name, err)
		}
	}
	return w, nil
}

// start starts the informers and waits until their caches are synced.
func (w *watcher) start(ctx context.Context) error {
	w.factory.Start(ctx.Done())
	for typ, ok := range w.factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			return fmt.Errorf("informer cache for %v did not sync: %w", typ, context.Cause(ctx))
		}
	}
	return nil
}

// run processes the queue with n workers until ctx ends.
func (w *watcher) run(ctx context.Context, n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			for {
				k, shutdown := w.queue.Get()
				if shutdown {
					return
				}
				w.process(k)
				w.queue.Done(k)
			}
		})
	}
	<-ctx.Done()
	w.queue.ShutDown()
	wg.Wait()
	w.factory.Shutdown()
}

// process recomputes every publisher of k.
func (w *watcher) process(k key) {
	w.mu.Lock()
	pubs := make([]*publisher, 0, len(w.pubs[k]))
	for _, p := range w.pubs[k] {
		pubs = append(pubs, p)
	}
	w.mu.Unlock()
	for _, p := range pubs {
		p.update()
	}
	if w.remote != nil && !k.IP.IsValid() {
		w.enqueueFederated(k.Namespace, k.Name) // its local member changed
	}
}

// subscribe finds (or creates) the publisher of t and calls add with it;
// the returned function calls remove and drops the publisher once remove
// reports it has no streams left. Both run under the watcher's lock, so a
// publisher never loses its last stream while another one joins. A
// ClusterIP is resolved to its service here, once per stream.
func (w *watcher) subscribe(t target, add func(*publisher), remove func(*publisher) (empty bool)) (unsubscribe func()) {
	k := key{Namespace: t.Namespace, Name: t.Name}
	if t.IP.IsValid() {
		if ns, name, ok := w.serviceByIP(t.IP); ok {
			k = key{Namespace: ns, Name: name}
		} else {
			k = key{IP: t.IP}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	byPort := w.pubs[k]
	if byPort == nil {
		byPort = map[uint16]*publisher{}
		w.pubs[k] = byPort
	}
	p := byPort[t.Port]
	if p == nil {
		pk := pubKey{key: k, Port: t.Port}
		p = newPublisher(func() snapshot { return w.snapshot(pk) })
		byPort[t.Port] = p
	}
	add(p)
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if remove(p) && w.pubs[k][t.Port] == p {
			delete(w.pubs[k], t.Port)
			if len(w.pubs[k]) == 0 {
				delete(w.pubs, k)
			}
		}
	}
}

// nodeZone is the zone label of node ("" when it has none or is unknown).
func (w *watcher) nodeZone(node string) string {
	if node == "" || w.nodeList == nil {
		return ""
	}
	n, err := w.nodeList.Get(node)
	if err != nil {
		return ""
	}
	return n.Labels[corev1.LabelTopologyZone]
}

// serviceByIP finds the service with ClusterIP ip.
func (w *watcher) serviceByIP(ip netip.Addr) (ns, name string, ok bool) {
	objs, err := w.services.GetIndexer().ByIndex(indexClusterIP, ip.String())
	if err != nil || len(objs) == 0 {
		return "", "", false
	}
	svc := objs[0].(*corev1.Service)
	return svc.Namespace, svc.Name, true
}

func (w *watcher) onService(oldObj, newObj any) {
	for _, obj := range []any{oldObj, newObj} {
		if svc, ok := unwrap[*corev1.Service](obj); ok {
			w.queue.Add(key{Namespace: svc.Namespace, Name: svc.Name})
			if w.serviceChanged != nil {
				w.serviceChanged()
			}
			w.warnMalformed(oldObj, newObj, "service "+svc.Namespace+"/"+svc.Name)
		}
	}
}

func (w *watcher) onSlice(oldObj, newObj any) {
	for _, obj := range []any{oldObj, newObj} {
		if slice, ok := unwrap[*discoveryv1.EndpointSlice](obj); ok {
			if svc := slice.Labels[discoveryv1.LabelServiceName]; svc != "" {
				w.queue.Add(key{Namespace: slice.Namespace, Name: svc})
			}
			// A headless mirror's addresses are answered for (remote.go).
			if addrs, _ := indexMirrorSliceAddrs(slice); w.remote != nil {
				for _, a := range addrs {
					w.queue.Add(key{IP: netip.MustParseAddr(a)})
				}
			}
		}
	}
}

func (w *watcher) onPod(oldObj, newObj any) {
	oldPod, _ := unwrap[*corev1.Pod](oldObj)
	newPod, _ := unwrap[*corev1.Pod](newObj)
	if oldPod != nil && newPod != nil && oldPod.ResourceVersion != "" && oldPod.ResourceVersion == newPod.ResourceVersion {
		return // resync
	}
	for _, pod := range []*corev1.Pod{oldPod, newPod} {
		if pod == nil {
			continue
		}
		for _, ip := range podIPs(pod) {
			w.queue.Add(key{IP: ip})
		}
		objs, _ := w.slices.GetIndexer().ByIndex(indexPod, pod.Namespace+"/"+pod.Name)
		for _, obj := range objs {
			slice := obj.(*discoveryv1.EndpointSlice)
			if svc := slice.Labels[discoveryv1.LabelServiceName]; svc != "" {
				w.queue.Add(key{Namespace: slice.Namespace, Name: svc})
			}
		}
	}
	if newPod != nil {
		w.warnMalformed(oldObj, newObj, "pod "+newPod.Namespace+"/"+newPod.Name)
	}
}

// warnMalformed logs a malformed opaque-ports annotation when it appears
// or changes (such an annotation marks no port opaque).
func (w *watcher) warnMalformed(oldObj, newObj any, what string) {
	n, ok := newObj.(metav1.Object)
	if !ok {
		return
	}
	value, ok := n.GetAnnotations()[podcontract.AnnotationOpaquePorts]
	if !ok {
		return
	}
	if o, ok := oldObj.(metav1.Object); ok && o.GetAnnotations()[podcontract.AnnotationOpaquePorts] == value {
		return
	}
	if _, err := podcontract.ParsePorts(value); err != nil {
		w.log.Warn("malformed annotation: no port is treated as opaque", "object", what, "annotation", podcontract.AnnotationOpaquePorts, "value", value, "error", err)
	}
}

// unwrap returns obj as a T, looking inside a deletion tombstone.
func unwrap[T any](obj any) (T, bool) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	t, ok := obj.(T)
	return t, ok
}

func indexServiceIPs(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil
	}
	ips := svc.Spec.ClusterIPs
	if len(ips) == 0 && svc.Spec.ClusterIP != "" {
		ips = []string{svc.Spec.ClusterIP}
	}
	var out []string
	for _, s := range ips {
		if ip, err := netip.ParseAddr(s); err == nil {
			out = append(out, ip.Unmap().String())
		}
	}
	return out, nil
}

func indexSliceService(obj any) ([]string, error) {
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || slice.Labels[discoveryv1.LabelServiceName] == "" {
		return nil, nil
	}
	return []string{slice.Namespace + "/" + slice.Labels[discoveryv1.LabelServiceName]}, nil
}

func indexSlicePods(obj any) ([]string, error) {
	slice, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, ep := range slice.Endpoints {
		if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" {
			ns := ref.Namespace
			if ns == "" {
				ns = slice.Namespace
			}
			out = append(out, ns+"/"+ref.Name)
		}
	}
	return out, nil
}

func indexPodIPs(obj any) ([]string, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, ip := range podIPs(pod) {
		out = append(out, ip.String())
	}
	return out, nil
}
