package diagnostics

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/destination"
	"github.com/plexus-mesh/plexus/control/meshpod"
	"github.com/plexus-mesh/plexus/control/spiffe"
)

// Authority is a service port as a proxy asks destination for it.
type Authority struct {
	Service, Namespace string
	Port               uint16
}

// ParseAuthority reads SVC.NS:PORT or SVC.NS.svc.CLUSTER_DOMAIN:PORT (a
// trailing dot and case do not matter, as for destination).
func ParseAuthority(s, clusterDomain string) (Authority, error) {
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		return Authority{}, fmt.Errorf("%q: want SVC.NS:PORT", s)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return Authority{}, fmt.Errorf("%q: port %q is not a number in 1-65535", s, portText)
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	name = strings.TrimSuffix(name, ".svc."+strings.ToLower(clusterDomain))
	svc, ns, ok := strings.Cut(name, ".")
	if !ok || strings.Contains(ns, ".") || len(validation.IsDNS1035Label(svc)) > 0 || len(validation.IsDNS1123Label(ns)) > 0 {
		return Authority{}, fmt.Errorf("%q: want SVC.NS:PORT or SVC.NS.svc.%s:PORT", s, clusterDomain)
	}
	return Authority{Service: svc, Namespace: ns, Port: uint16(port)}, nil
}

// Endpoint is one address of an EndpointSlice of the service port, and
// what destination makes of it.
type Endpoint struct {
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

// EndpointsReport is what Endpoints.Run returns.
type EndpointsReport struct {
	Authority   string     `json:"authority"` // SVC.NS.svc.DOMAIN:PORT
	TrustDomain string     `json:"trustDomain"`
	Opaque      bool       `json:"opaque"` // the service lists the port as opaque
	Endpoints   []Endpoint `json:"endpoints"`
}

// Endpoints computes from the Kubernetes API what destination's Get
// streams for a service port. destination keeps its rules unexported
// (control/destination/snapshots.go, endpoint.go); this follows them: a
// slice endpoint is published when ready (or ready unset), or serving
// and terminating, and its pod (if it names one) exists and has not
// finished; a meshed pod's identity is
// spiffe://TRUST_DOMAIN/ns/NS/sa/SA.
type Endpoints struct {
	Client        kubernetes.Interface
	TrustDomain   string
	ClusterDomain string
}

// Run returns the endpoints of a, published ones first, then by address.
func (e Endpoints) Run(ctx context.Context, a Authority) (*EndpointsReport, error) {
	r := &EndpointsReport{
		Authority:   fmt.Sprintf("%s.%s.svc.%s:%d", a.Service, a.Namespace, e.ClusterDomain, a.Port),
		TrustDomain: e.TrustDomain,
		Endpoints:   []Endpoint{},
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
func (e Endpoints) endpoints(ctx context.Context, pods map[string]*corev1.Pod, s *discoveryv1.EndpointSlice, ep *discoveryv1.Endpoint, port uint16) ([]Endpoint, error) {
	c := ep.Conditions
	base := Endpoint{
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
	var out []Endpoint
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
func (e Endpoints) pod(ctx context.Context, cache map[string]*corev1.Pod, ns, name string) (*corev1.Pod, error) {
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

func sortEndpoints(eps []Endpoint) {
	b2i := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	slices.SortStableFunc(eps, func(x, y Endpoint) int {
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
