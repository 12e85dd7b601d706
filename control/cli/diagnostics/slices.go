package diagnostics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/destination"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// SliceEndpoint is one address of an EndpointSlice of the service port,
// and what destination's rules make of it.
type SliceEndpoint struct {
	Address string `json:"address"` // IP:target port
	// Published: destination sends it to proxies; Terminating ones get
	// nothing new while any published one is not terminating.
	Published   bool   `json:"published"`
	Ready       bool   `json:"ready"` // unset in the slice counts as true
	Serving     bool   `json:"serving"`
	Terminating bool   `json:"terminating"`
	Pod         string `json:"pod,omitempty"`
	// Identity is the SPIFFE ID a proxy requires of the pod; empty when
	// the pod is not meshed (the proxy then connects in plaintext).
	Identity string `json:"identity,omitempty"`
	Zone     string `json:"zone,omitempty"`
	Node     string `json:"node,omitempty"`
	Opaque   bool   `json:"opaque"` // the target port is in the pod's opaque-ports
	Slice    string `json:"slice"`
	// Note says why an endpoint is not published beyond its conditions.
	Note string `json:"note,omitempty"`
}

// SliceReport is what SliceEndpoints.Run returns.
type SliceReport struct {
	Authority   string          `json:"authority"` // SVC.NS.svc.DOMAIN:PORT
	TrustDomain string          `json:"trustDomain"`
	Opaque      bool            `json:"opaque"` // the service lists the port as opaque
	Endpoints   []SliceEndpoint `json:"endpoints"`
}

// SliceEndpoints computes from the Kubernetes API what destination's Get
// should stream for a service port: plexusctl diagnostics endpoints
// --compare sets it beside what destination does stream. destination
// keeps its rules unexported (control/destination/snapshots.go,
// endpoint.go); this follows them: a slice endpoint is published when
// ready (or ready unset), or serving and terminating, and its pod (if it
// names one) exists and has not finished; a meshed pod's identity is
// spiffe://TRUST_DOMAIN/ns/NS/sa/SA.
type SliceEndpoints struct {
	Client        kubernetes.Interface
	TrustDomain   string
	ClusterDomain string
}

// Run returns the endpoints of a, published ones first, then by address.
func (e SliceEndpoints) Run(ctx context.Context, a Authority) (*SliceReport, error) {
	r := &SliceReport{
		Authority:   a.String(e.ClusterDomain),
		TrustDomain: e.TrustDomain,
		Endpoints:   []SliceEndpoint{},
	}
	what := fmt.Sprintf("service %s/%s", a.Namespace, a.Service)
	svc, err := e.Client.CoreV1().Services(a.Namespace).Get(ctx, a.Service, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s not found", what)
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil, fmt.Errorf("%s is of type ExternalName (%s): destination does not resolve it, proxies use DNS", what, svc.Spec.ExternalName)
	}
	r.Opaque = destination.OpaquePort(svc.Annotations, a.Port)
	var svcPort *corev1.ServicePort
	var ports []string
	for i := range svc.Spec.Ports {
		p := &svc.Spec.Ports[i]
		if p.Protocol == "" || p.Protocol == corev1.ProtocolTCP {
			ports = append(ports, strconv.Itoa(int(p.Port)))
			if p.Port == int32(a.Port) {
				svcPort = p
			}
		}
	}
	if svcPort == nil {
		return nil, fmt.Errorf("%s has no TCP port %d (it has: %s); destination gives no endpoints", what, a.Port, cmp.Or(strings.Join(ports, ", "), "none"))
	}
	list, err := e.Client.DiscoveryV1().EndpointSlices(a.Namespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + a.Service})
	if err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of %s: %w", what, err)
	}
	pods := map[string]*corev1.Pod{}
	for i := range list.Items {
		s := &list.Items[i]
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue
		}
		target, ok := destination.SlicePort(s, svcPort.Name)
		if !ok {
			continue
		}
		for j := range s.Endpoints {
			eps, err := e.endpoints(ctx, pods, s, &s.Endpoints[j], target)
			if err != nil {
				return nil, err
			}
			r.Endpoints = append(r.Endpoints, eps...)
		}
	}
	sortEndpoints(r.Endpoints)
	return r, nil
}

// endpoints are the addresses of one slice endpoint.
func (e SliceEndpoints) endpoints(ctx context.Context, pods map[string]*corev1.Pod, s *discoveryv1.EndpointSlice, ep *discoveryv1.Endpoint, port uint16) ([]SliceEndpoint, error) {
	c := ep.Conditions
	base := SliceEndpoint{
		Ready:       c.Ready == nil || *c.Ready,
		Serving:     c.Serving != nil && *c.Serving,
		Terminating: c.Terminating != nil && *c.Terminating,
		Zone:        deref(ep.Zone),
		Node:        deref(ep.NodeName),
		Slice:       s.Name,
	}
	base.Published, _ = destination.SliceEndpointState(c) // destination's rule
	if ref := ep.TargetRef; ref != nil && ref.Kind == "Pod" {
		ns := cmp.Or(ref.Namespace, s.Namespace)
		base.Pod = ref.Name
		pod, err := e.pod(ctx, pods, ns, ref.Name)
		if err != nil {
			return nil, err
		}
		switch {
		case pod == nil:
			base.Published, base.Note = false, "pod gone"
		case pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed:
			base.Published, base.Note = false, "pod "+strings.ToLower(string(pod.Status.Phase))
		default:
			if meshpod.IsMeshed(pod) {
				base.Identity = spiffe.New(e.TrustDomain, pod.Namespace, cmp.Or(pod.Spec.ServiceAccountName, "default")).String()
			}
			base.Opaque = destination.OpaquePort(pod.Annotations, port)
		}
	}
	var out []SliceEndpoint
	for _, a := range ep.Addresses {
		ip, err := netip.ParseAddr(a)
		if err != nil {
			continue
		}
		one := base
		one.Address = netip.AddrPortFrom(ip.Unmap(), port).String()
		out = append(out, one)
	}
	return out, nil
}

// pod gets a pod once per run; nil when it does not exist.
func (e SliceEndpoints) pod(ctx context.Context, cache map[string]*corev1.Pod, ns, name string) (*corev1.Pod, error) {
	key := ns + "/" + name
	if p, ok := cache[key]; ok {
		return p, nil
	}
	p, err := e.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		p, err = nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pod %s: %w", key, err)
	}
	cache[key] = p
	return p, nil
}

func sortEndpoints(eps []SliceEndpoint) {
	slices.SortStableFunc(eps, func(x, y SliceEndpoint) int {
		return cmp.Or(b2i(y.Published)-b2i(x.Published), b2i(x.Terminating)-b2i(y.Terminating), compareAddr(x.Address, y.Address), strings.Compare(x.Slice, y.Slice))
	})
}

func compareAddr(x, y string) int {
	a, errA := netip.ParseAddrPort(x)
	b, errB := netip.ParseAddrPort(y)
	if err := errors.Join(errA, errB); err != nil {
		return strings.Compare(x, y)
	}
	return a.Compare(b)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
