package destination

// Remote discovery, the flat mode of multicluster (multicluster/PLAN-FLAT.md
// §3): a local Service labelled multicluster.plexus.dev/remote-discovery=C
// (a mirror the multicluster extension writes, selector-less) is answered
// with the endpoints of the Service RemoteNameLabel in the same namespace
// of linked cluster C, which the proxies reach pod to pod. Destination
// watches C itself, through the kubeconfig in a Secret of type
// CredentialsSecretType in Config.RemoteClustersNamespace (labelled with
// C's name), with a second watcher on C's API server: C's pod churn never
// becomes writes in this cluster. The Secrets are watched only while that
// namespace exists (the extension installs it with the Role that lets
// destination read them). A remote cluster whose watcher has not synced
// yet, or whose Secret went away, answers its mirrors with no endpoints.

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/plexus-mesh/plexus/control/kubeclient"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// Informer index names of remote discovery, on the local Services.
const (
	indexRemote        = "remote"        // mirrors by <cluster>/<ns>/<remote name>
	indexRemoteCluster = "remoteCluster" // mirrors by <cluster>
	indexFederated     = "federated"     // federated Services by their local member's <ns>/<name>
	// indexMirrorAddr: the service mirror's slices of headless mirrors
	// (on the local EndpointSlices) by each address.
	indexMirrorAddr = "mirrorAddr"
)

// remoteClusters keeps a watcher of every linked cluster whose Secret is
// in the namespace.
type remoteClusters struct {
	local     *watcher
	client    kubernetes.Interface // the local cluster's
	namespace string
	log       *slog.Logger
	// The checking of each cluster's gateway and API server (health.go).
	gatewayGauges, apiGauges healthGauges
	gatewayProbes, apiProbes map[string]*prober
	// newClient builds a remote cluster's client from its kubeconfig (a
	// test replaces it).
	newClient func(kubeconfig []byte) (kubernetes.Interface, error)
	// newReady builds the check of its API server (a test replaces it).
	newReady func(kubeconfig []byte) (func(context.Context) error, error)

	mu       sync.Mutex
	ctx      context.Context // run's
	clusters map[string]*remoteCluster
	// latest is the generation of each cluster's newest Secret: a watcher
	// started for an older one is dropped once synced.
	latest  map[string]uint64
	gen     uint64
	secrets context.CancelFunc // stops the Secret informer; nil while off
}

// remoteCluster is one linked cluster's watcher.
type remoteCluster struct {
	w *watcher
	// ready checks its API server (kubeclient.RemoteReady).
	ready  func(context.Context) error
	hash   [sha256.Size]byte // of what it was built from
	cancel context.CancelFunc
}

func newRemoteClusters(local *watcher, client kubernetes.Interface, namespace string, gateways, apis healthGauges, log *slog.Logger) (*remoteClusters, error) {
	r := &remoteClusters{
		local: local, client: client, namespace: namespace, gatewayGauges: gateways, apiGauges: apis, log: log.With("component", "remote-discovery"),
		newClient: func(kubeconfig []byte) (kubernetes.Interface, error) {
			return kubeclient.Remote(kubeconfig, "plexus-destination")
		},
		newReady: func(kubeconfig []byte) (func(context.Context) error, error) {
			return kubeclient.RemoteReady(kubeconfig, "plexus-destination")
		},
		clusters: map[string]*remoteCluster{}, latest: map[string]uint64{},
		gatewayProbes: map[string]*prober{}, apiProbes: map[string]*prober{},
	}
	if err := local.services.AddIndexers(cache.Indexers{indexRemote: indexRemoteMirror, indexRemoteCluster: indexRemoteMirrorCluster, indexFederated: indexFederatedMember}); err != nil {
		return nil, fmt.Errorf("adding remote-discovery indexers: %w", err)
	}
	if err := local.slices.AddIndexers(cache.Indexers{indexMirrorAddr: indexMirrorSliceAddrs}); err != nil {
		return nil, fmt.Errorf("adding remote-discovery indexers: %w", err)
	}
	_, err := local.factory.Core().V1().Namespaces().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.onNamespace(obj, true) },
		UpdateFunc: func(_, obj any) { r.onNamespace(obj, true) },
		DeleteFunc: func(obj any) { r.onNamespace(obj, false) },
	})
	if err != nil {
		return nil, fmt.Errorf("adding the namespace handler of remote discovery: %w", err)
	}
	return r, nil
}

// run sets the context the remote watchers live in; they stop with it.
func (r *remoteClusters) run(ctx context.Context) {
	r.mu.Lock()
	r.ctx = ctx
	r.mu.Unlock()
	// The namespace may have been seen before ctx was set.
	if ns, err := r.local.factory.Core().V1().Namespaces().Lister().Get(r.namespace); err == nil {
		r.onNamespace(ns, true)
	}
	<-ctx.Done()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.secrets != nil {
		r.secrets()
	}
	for _, c := range r.clusters {
		c.cancel()
	}
}

// onNamespace starts the Secret informer when the namespace exists and
// stops it, and every remote watcher, when it goes.
func (r *remoteClusters) onNamespace(obj any, exists bool) {
	ns, ok := unwrap[*corev1.Namespace](obj)
	if !ok || ns.Name != r.namespace {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case exists && r.secrets == nil && r.ctx != nil:
		ctx, cancel := context.WithCancel(r.ctx)
		r.secrets = cancel
		go r.watchSecrets(ctx)
	case !exists && r.secrets != nil:
		r.secrets()
		r.secrets = nil
		for name := range r.clusters {
			r.dropLocked(name)
		}
	}
}

// watchSecrets follows the credentials Secrets until ctx ends.
func (r *remoteClusters) watchSecrets(ctx context.Context) {
	factory := informers.NewSharedInformerFactoryWithOptions(r.client, 0, informers.WithNamespace(r.namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("type", mc.CredentialsSecretType).String()
		}))
	inf := factory.Core().V1().Secrets().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.onSecret(nil, obj) },
		UpdateFunc: r.onSecret,
		DeleteFunc: func(obj any) { r.onSecret(obj, nil) },
	})
	if err != nil {
		r.log.Error("watching the linked clusters' Secrets", "namespace", r.namespace, "error", err)
		return
	}
	r.log.Info("watching linked clusters' credentials", "namespace", r.namespace)
	factory.Start(ctx.Done())
	<-ctx.Done()
	factory.Shutdown()
}

// onSecret starts, replaces or drops the watcher of a Secret's cluster.
func (r *remoteClusters) onSecret(oldObj, newObj any) {
	if old, ok := unwrap[*corev1.Secret](oldObj); ok {
		if s, ok := newObj.(*corev1.Secret); !ok || s.Labels[mc.ClusterNameLabel] != old.Labels[mc.ClusterNameLabel] {
			r.mu.Lock()
			r.dropLocked(old.Labels[mc.ClusterNameLabel])
			r.mu.Unlock()
		}
	}
	s, ok := newObj.(*corev1.Secret)
	if !ok || s.Type != mc.CredentialsSecretType {
		return
	}
	name := s.Labels[mc.ClusterNameLabel]
	kubeconfig := s.Data[mc.CredentialsKey]
	if name == "" || len(kubeconfig) == 0 {
		r.log.Warn("credentials Secret ignored: it needs the label and the key", "secret", s.Namespace+"/"+s.Name,
			"label", mc.ClusterNameLabel, "key", mc.CredentialsKey)
		return
	}
	trustDomain := s.Annotations[mc.TrustDomainAnnotation]
	if trustDomain == "" {
		trustDomain = r.local.cfg.TrustDomain
	}
	var gateway netip.AddrPort
	if a := s.Annotations[mc.GatewayAddressAnnotation]; a != "" {
		var err error
		if gateway, err = netip.ParseAddrPort(a); err != nil {
			r.log.Warn("credentials Secret's gateway address ignored: want ip:port", "secret", s.Namespace+"/"+s.Name,
				"annotation", mc.GatewayAddressAnnotation, "error", err)
		}
	}
	hash := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s\x00%s", trustDomain, gateway, kubeconfig))
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.clusters[name]; c != nil && c.hash == hash {
		return // a resync, or a change of something else
	}
	r.gen++
	r.latest[name] = r.gen
	go r.start(name, kubeconfig, trustDomain, gateway, hash, r.gen)
}

// start builds the watcher of cluster name, waits for its caches, and
// swaps it in unless a newer Secret came meanwhile.
func (r *remoteClusters) start(name string, kubeconfig []byte, trustDomain string, gateway netip.AddrPort, hash [sha256.Size]byte, gen uint64) {
	log := r.log.With("cluster", name)
	client, err := r.newClient(kubeconfig)
	if err != nil {
		log.Error("linked cluster's kubeconfig is unusable", "error", err)
		return
	}
	ready, err := r.newReady(kubeconfig)
	if err != nil {
		log.Error("linked cluster's kubeconfig is unusable", "error", err)
		return
	}
	cfg := r.local.cfg
	cfg.TrustDomain = trustDomain
	w, err := newClusterWatcher(cfg, client, log, false)
	if err != nil {
		log.Error("watching linked cluster", "error", err)
		return
	}
	w.cluster = name
	r.mu.Lock()
	ctx, cancel := context.WithCancel(r.ctx)
	r.mu.Unlock()
	go w.forward(ctx, r.local, name)
	if err := w.start(ctx); err != nil {
		cancel()
		return // replaced or stopped before it synced
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.latest[name] != gen {
		cancel()
		return
	}
	if old := r.clusters[name]; old != nil {
		old.cancel()
	}
	r.clusters[name] = &remoteCluster{w: w, ready: ready, hash: hash, cancel: cancel}
	log.Info("linked cluster's caches synced")
	r.probeGatewayLocked(name, gateway)
	r.probeAPILocked(name, false)
	r.enqueueMirrors(name)
}

// dropLocked stops cluster name's watcher (r.mu held).
func (r *remoteClusters) dropLocked(name string) {
	r.gen++
	r.latest[name] = r.gen // a watcher still starting is dropped
	if c := r.clusters[name]; c != nil {
		c.cancel()
		delete(r.clusters, name)
		r.log.Info("linked cluster dropped", "cluster", name)
	}
	r.probeGatewayLocked(name, netip.AddrPort{})
	r.probeAPILocked(name, true)
	r.enqueueMirrors(name)
}

// enqueueMirrors recomputes every mirror of cluster name.
func (r *remoteClusters) enqueueMirrors(name string) {
	objs, _ := r.local.services.GetIndexer().ByIndex(indexRemoteCluster, name)
	for _, obj := range objs {
		svc := obj.(*corev1.Service)
		r.local.queue.Add(key{Namespace: svc.Namespace, Name: svc.Name})
	}
}

// clusterOf is cluster name's synced watcher and its gateway, zero when
// it has none or it fails its health checks; nil when it has none.
func (r *remoteClusters) clusterOf(name string) (*watcher, netip.AddrPort) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.clusters[name]; c != nil {
		// The gateway (GatewayAddressAnnotation) is its prober's.
		if p := r.gatewayProbes[name]; p != nil && !p.down {
			return c.w, p.gw
		}
		return c.w, netip.AddrPort{}
	}
	return nil, netip.AddrPort{}
}

// mirrorSnapshot is the snapshot of mirror svc of cluster name: the remote
// Service's endpoints, under the mirror's labels and name; in gateway mode
// its meshed endpoints only, each through the cluster's gateway (the
// gateway passes on nothing but a mesh handshake). base is the mirror's
// own snapshot, which stands when the cluster is not watched or, in
// gateway mode, has no healthy gateway (no endpoints).
func (r *remoteClusters) mirrorSnapshot(name string, svc *corev1.Service, port uint16, base snapshot) snapshot {
	rw, gateway := r.clusterOf(name)
	viaGateway := svc.Labels[mc.GatewayLabel] != ""
	if rw == nil || viaGateway && !gateway.IsValid() {
		return base
	}
	s := rw.serviceSnapshot(svc.Namespace, svc.Labels[mc.RemoteNameLabel], port)
	if viaGateway {
		eps := make(map[netip.AddrPort]endpoint, len(s.endpoints))
		for a, e := range s.endpoints {
			if e.identity != "" {
				e.via = gateway
				eps[a] = e
			}
		}
		s.endpoints = eps
	}
	s.exists = true // the mirror does, whatever the remote Service does
	s.setLabels = base.setLabels
	s.profile.fqn = base.profile.fqn
	return s
}

// podIPSnapshot answers for a pod IP this cluster does not know but a
// headless mirror's EndpointSlice lists (what its DNS names resolve to,
// flat mode) with the linked cluster's pod of that IP, its identity in
// that cluster's trust domain. Nothing else is taken from a linked
// cluster: it cannot claim this cluster's other addresses. base stands
// otherwise.
func (r *remoteClusters) podIPSnapshot(ip netip.Addr, port uint16, base snapshot) snapshot {
	objs, _ := r.local.slices.GetIndexer().ByIndex(indexMirrorAddr, ip.String())
	var names []string
	for _, obj := range objs {
		if c := obj.(*discoveryv1.EndpointSlice).Labels[mc.ClusterNameLabel]; c != "" {
			names = append(names, c)
		}
	}
	slices.Sort(names)
	r.mu.Lock()
	ws := make([]*watcher, 0, len(names))
	for _, n := range slices.Compact(names) {
		if c := r.clusters[n]; c != nil {
			ws = append(ws, c.w)
		}
	}
	r.mu.Unlock()
	for _, w := range ws {
		if s := w.podIPSnapshot(ip, port); s.exists {
			return s
		}
	}
	return base
}

// forward drains the remote watcher's queue into the local one, as the
// keys of the local mirrors of each remote Service, or of a remote pod's
// IP, until ctx ends.
func (w *watcher) forward(ctx context.Context, local *watcher, cluster string) {
	go func() {
		<-ctx.Done()
		w.queue.ShutDown()
		w.factory.Shutdown()
	}()
	for {
		k, shutdown := w.queue.Get()
		if shutdown {
			return
		}
		if k.IP.IsValid() {
			local.queue.Add(key{IP: k.IP})
		} else {
			objs, _ := local.services.GetIndexer().ByIndex(indexRemote, cluster+"/"+k.Namespace+"/"+k.Name)
			for _, obj := range objs {
				svc := obj.(*corev1.Service)
				local.queue.Add(key{Namespace: svc.Namespace, Name: svc.Name})
			}
		}
		w.queue.Done(k)
	}
}

// remoteOf is the cluster a remote-discovery mirror answers for ("" for
// any other Service).
func remoteOf(svc *corev1.Service) string {
	if svc.Labels[mc.RemoteNameLabel] == "" {
		return ""
	}
	return svc.Labels[mc.RemoteDiscoveryLabel]
}

// indexRemoteMirror indexes the mirrors, and the federated Services, by
// each remote Service they answer for: <cluster>/<ns>/<name>.
func indexRemoteMirror(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil
	}
	if remoteOf(svc) != "" {
		return []string{remoteOf(svc) + "/" + svc.Namespace + "/" + svc.Labels[mc.RemoteNameLabel]}, nil
	}
	var out []string
	for _, c := range federatedClusters(svc) {
		out = append(out, c+"/"+svc.Namespace+"/"+svc.Labels[mc.FederatedLabel])
	}
	return out, nil
}

// indexRemoteMirrorCluster indexes them by each cluster.
func indexRemoteMirrorCluster(obj any) ([]string, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return nil, nil
	}
	if remoteOf(svc) != "" {
		return []string{remoteOf(svc)}, nil
	}
	return federatedClusters(svc), nil
}

// indexMirrorSliceAddrs indexes the service mirror's slices of headless
// mirrors by each address.
func indexMirrorSliceAddrs(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || s.Labels[discoveryv1.LabelManagedBy] != mc.MirrorSliceManager {
		return nil, nil
	}
	var out []string
	for _, ep := range s.Endpoints {
		for _, a := range ep.Addresses {
			if ip, err := netip.ParseAddr(a); err == nil {
				out = append(out, ip.Unmap().String())
			}
		}
	}
	return out, nil
}
