package gateway

import (
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// indexAddr indexes EndpointSlices by each ip:port they offer.
const indexAddr = "addr"

// Targets answers where the gateway may connect: the endpoints of this
// cluster's Services exported in gateway mode (ExportedLabel=ExportedGateway)
// that are addresses of meshed pods whose proxy nothing skips (proxied),
// so that what passes through always ends at a proxy that runs the mesh
// handshake and its policy. Anything else (a
// pod of a Service not exported, a pod without the proxy, the node, the
// API server) is refused.
type Targets struct {
	factory  informers.SharedInformerFactory // the exported Services
	all      informers.SharedInformerFactory // EndpointSlices and Pods
	services corelisters.ServiceLister
	slices   cache.Indexer
	pods     corelisters.PodLister
	synced   []cache.InformerSynced
}

// NewTargets watches client's exported Services, EndpointSlices and Pods
// (of the pods, only what says whether they are meshed is kept).
func NewTargets(client kubernetes.Interface) (*Targets, error) {
	exported := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.LabelSelector = mc.ExportedLabel + "=" + mc.ExportedGateway
	}))
	all := informers.NewSharedInformerFactory(client, 0)
	t := &Targets{factory: exported, all: all, services: exported.Core().V1().Services().Lister()}
	sliceInf := all.Discovery().V1().EndpointSlices().Informer()
	if err := sliceInf.AddIndexers(cache.Indexers{indexAddr: sliceAddrs}); err != nil {
		return nil, fmt.Errorf("indexing EndpointSlices: %w", err)
	}
	t.slices = sliceInf.GetIndexer()
	podInf := all.Core().V1().Pods().Informer()
	if err := podInf.SetTransform(slimPod); err != nil {
		return nil, fmt.Errorf("trimming cached pods: %w", err)
	}
	t.pods = all.Core().V1().Pods().Lister()
	t.synced = []cache.InformerSynced{exported.Core().V1().Services().Informer().HasSynced, sliceInf.HasSynced, podInf.HasSynced}
	return t, nil
}

// Run starts the informers and waits for their caches, then until ctx
// ends.
func (t *Targets) Run(ctx context.Context) error {
	t.factory.Start(ctx.Done())
	t.all.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), t.synced...) {
		return ctx.Err()
	}
	<-ctx.Done()
	t.factory.Shutdown()
	t.all.Shutdown()
	return nil
}

// Ready reports an error until the caches have synced.
func (t *Targets) Ready() error {
	for _, s := range t.synced {
		if !s() {
			return fmt.Errorf("the exported Services, EndpointSlices and Pods have not synced yet")
		}
	}
	return nil
}

// Allowed reports why the gateway may not connect to dst; nil when it may.
func (t *Targets) Allowed(dst netip.AddrPort) error {
	objs, _ := t.slices.ByIndex(indexAddr, dst.String())
	for _, obj := range objs {
		s := obj.(*discoveryv1.EndpointSlice)
		svc, err := t.services.Services(s.Namespace).Get(s.Labels[discoveryv1.LabelServiceName])
		if err != nil || svc.Labels[mc.ExportedLabel] != mc.ExportedGateway {
			continue // not exported in gateway mode
		}
		for _, ep := range s.Endpoints {
			if ep.TargetRef == nil || ep.TargetRef.Kind != "Pod" || !hasAddr(ep, dst.Addr()) {
				continue
			}
			if pod, err := t.pods.Pods(s.Namespace).Get(ep.TargetRef.Name); err == nil && proxied(pod, dst) {
				return nil
			}
		}
	}
	return fmt.Errorf("%s is no meshed endpoint of a Service exported in gateway mode", dst)
}

// proxied reports whether a connection to dst reaches pod's proxy: pod
// runs it, has the address itself (a slice, which anyone who may write
// EndpointSlices in its namespace can write, cannot lend a meshed pod's
// name to another address), and does not let the port or any source skip
// it (skip-inbound-ports, skip-inbound-subnets).
func proxied(pod *corev1.Pod, dst netip.AddrPort) bool {
	if !meshpod.IsMeshed(pod) || !slices.Contains(meshpod.IPs(pod), dst.Addr()) {
		return false
	}
	cfg, err := podcontract.FromAnnotations(podcontract.Defaults(), pod.Annotations)
	if err != nil || len(cfg.SkipInboundSubnets) > 0 {
		return false
	}
	for _, r := range cfg.SkipInboundPorts {
		if r.Contains(dst.Port()) {
			return false
		}
	}
	return true
}

func hasAddr(ep discoveryv1.Endpoint, a netip.Addr) bool {
	for _, s := range ep.Addresses {
		if ip, err := netip.ParseAddr(s); err == nil && ip.Unmap() == a {
			return true
		}
	}
	return false
}

// sliceAddrs is the ip:port of every endpoint and port of a slice.
func sliceAddrs(obj any) ([]string, error) {
	s, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, p := range s.Ports {
		if p.Port == nil || (p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP) {
			continue
		}
		for _, ep := range s.Endpoints {
			for _, a := range ep.Addresses {
				if ip, err := netip.ParseAddr(a); err == nil {
					out = append(out, netip.AddrPortFrom(ip.Unmap(), uint16(*p.Port)).String())
				}
			}
		}
	}
	return out, nil
}

// slimPod keeps of a pod what proxied reads: its containers' names, its
// addresses, and its skip annotations.
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	slim := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID, ResourceVersion: pod.ResourceVersion}}
	slim.Spec.HostNetwork = pod.Spec.HostNetwork
	slim.Status.PodIP, slim.Status.PodIPs = pod.Status.PodIP, pod.Status.PodIPs
	for _, k := range []string{podcontract.AnnotationSkipInboundPorts, podcontract.AnnotationSkipInboundSubnets} {
		if v, ok := pod.Annotations[k]; ok {
			if slim.Annotations == nil {
				slim.Annotations = map[string]string{}
			}
			slim.Annotations[k] = v
		}
	}
	for _, c := range pod.Spec.Containers {
		slim.Spec.Containers = append(slim.Spec.Containers, corev1.Container{Name: c.Name})
	}
	for _, c := range pod.Spec.InitContainers {
		slim.Spec.InitContainers = append(slim.Spec.InitContainers, corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy})
	}
	return slim, nil
}
