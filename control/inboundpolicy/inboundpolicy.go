// Package inboundpolicy computes, outside the control plane, the inbound
// policy destination sends for a pod port — from objects listed through
// the API and the settings in destination's Deployment, with
// destination.ComputeInboundPolicy — and evaluates it for a client with
// the proxy's own mesh/policy/authz.
package inboundpolicy

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
	gateway "sigs.k8s.io/gateway-api/pkg/client/clientset/versioned"

	"github.com/plexus-mesh/plexus/control/destination"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
)

// DestinationDeployment is the Deployment whose args hold the settings
// (deploy/plexus-control/destination.yaml).
const DestinationDeployment = "plexus-destination"

// Clients read what destination reads: the typed client for Namespaces,
// Pods and Deployments, the dynamic one for policy.plexus.dev (as
// destination's informers), the Gateway API one for routes.
type Clients struct {
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
	Gateway gateway.Interface
}

// Snapshot is what destination's caches would hold: every Namespace,
// policy.plexus.dev object, HTTPRoute and GRPCRoute, listed once.
type Snapshot struct {
	Reads *destination.InboundObjects
	// Servers are every Server, by namespace and name.
	Servers []*policyv1alpha1.Server
	// Notes say what counts as none: a kind the API server does not
	// serve, an object that cannot be read (destination ignores both).
	Notes []string
}

// policyKinds are the policy.plexus.dev resources and their types.
var policyKinds = []struct {
	gvr    schema.GroupVersionResource
	kind   string
	newObj func() any
}{
	{policyv1alpha1.ServerResource, policyv1alpha1.ServerKind, func() any { return &policyv1alpha1.Server{} }},
	{policyv1alpha1.AuthorizationPolicyResource, policyv1alpha1.AuthorizationPolicyKind, func() any { return &policyv1alpha1.AuthorizationPolicy{} }},
	{policyv1alpha1.MeshTLSAuthenticationResource, policyv1alpha1.MeshTLSAuthenticationKind, func() any { return &policyv1alpha1.MeshTLSAuthentication{} }},
	{policyv1alpha1.NetworkAuthenticationResource, policyv1alpha1.NetworkAuthenticationKind, func() any { return &policyv1alpha1.NetworkAuthentication{} }},
	{policyv1alpha1.HTTPLocalRateLimitPolicyResource, policyv1alpha1.HTTPLocalRateLimitPolicyKind, func() any { return &policyv1alpha1.HTTPLocalRateLimitPolicy{} }},
}

// Snapshot lists, in every namespace, what inbound policies read. A kind
// the API server does not serve (its CRD is not installed) counts as
// none, as in destination; so does an object that does not decode.
func (c Clients) Snapshot(ctx context.Context) (*Snapshot, error) {
	s := &Snapshot{}
	var objs []any
	nss, err := c.Kube.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing namespaces: %w", err)
	}
	for i := range nss.Items {
		objs = append(objs, &nss.Items[i])
	}
	for _, k := range policyKinds {
		list, err := c.Dynamic.Resource(k.gvr).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			s.Notes = append(s.Notes, fmt.Sprintf("the %s CRD is not installed: %s objects count as none", k.gvr.GroupResource(), k.kind))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %s: %w", k.gvr.GroupResource(), err)
		}
		for i := range list.Items {
			u := &list.Items[i]
			t := k.newObj()
			if err := policyv1alpha1.Decode(u, t); err != nil {
				s.Notes = append(s.Notes, fmt.Sprintf("ignored, as destination ignores it: %v", err))
				continue
			}
			objs = append(objs, t)
			if srv, ok := t.(*policyv1alpha1.Server); ok {
				s.Servers = append(s.Servers, srv)
			}
		}
	}
	gw := c.Gateway.GatewayV1()
	for _, r := range []struct {
		kind string
		list func() ([]any, error)
	}{
		{"HTTPRoute", func() ([]any, error) {
			l, err := gw.HTTPRoutes(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			return pointers(l, err, func(l *gatewayv1.HTTPRouteList) []gatewayv1.HTTPRoute { return l.Items })
		}},
		{"GRPCRoute", func() ([]any, error) {
			l, err := gw.GRPCRoutes(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
			return pointers(l, err, func(l *gatewayv1.GRPCRouteList) []gatewayv1.GRPCRoute { return l.Items })
		}},
	} {
		routes, err := r.list()
		if apierrors.IsNotFound(err) {
			s.Notes = append(s.Notes, fmt.Sprintf("the Gateway API %s CRD is not installed: %s objects count as none", r.kind, r.kind))
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing %ss: %w", r.kind, err)
		}
		objs = append(objs, routes...)
	}
	if s.Reads, err = destination.NewInboundObjects(objs...); err != nil {
		return nil, err
	}
	slices.SortFunc(s.Servers, func(a, b *policyv1alpha1.Server) int {
		return cmp.Or(strings.Compare(a.Namespace, b.Namespace), strings.Compare(a.Name, b.Name))
	})
	return s, nil
}

// pointers returns a pointer to each item of a list that came without
// error.
func pointers[L any, T any](l L, err error, items func(L) []T) ([]any, error) {
	if err != nil {
		return nil, err
	}
	ts := items(l)
	out := make([]any, len(ts))
	for i := range ts {
		out[i] = &ts[i]
	}
	return out, nil
}

// Policy computes the inbound policy of pod's port as destination does;
// warnings are what destination logs while computing it, one per line.
func (s *Snapshot) Policy(cfg destination.Config, pod *corev1.Pod, port uint16) (*pb.InboundPolicy, []string, error) {
	p, err := destination.ComputeInboundPolicy(s.Reads, cfg, pod, port)
	if p == nil {
		return nil, nil, err
	}
	var warnings []string
	if err != nil {
		warnings = strings.Split(err.Error(), "\n")
	}
	return p, warnings, nil
}

// Setting is one of destination's settings and where it was read.
type Setting struct {
	Value string `json:"value"`
	// From: "args" (of the container, flag given) or "default" (why in
	// Settings.Source).
	From string `json:"from"`
}

// Settings are the destination settings inbound policies depend on.
type Settings struct {
	// Source names the Deployment read, and why defaults were used.
	Source               string  `json:"source"`
	TrustDomain          Setting `json:"trustDomain"`
	DefaultInboundPolicy Setting `json:"defaultInboundPolicy"`
	ClusterNetworks      Setting `json:"clusterNetworks"`
}

// Where a Setting comes from.
const (
	FromArgs    = "args"
	FromDefault = "default"
)

// Settings reads --trust-domain, --default-inbound-policy and
// --cluster-networks from the args of destination's Deployment in
// namespace ns (its container "destination", else its first); a flag not
// given, or no Deployment, leaves destination's default.
func (c Clients) Settings(ctx context.Context, ns string) (Settings, error) {
	def := destination.DefaultConfig()
	s := Settings{
		TrustDomain:          Setting{def.TrustDomain, FromDefault},
		DefaultInboundPolicy: Setting{string(def.DefaultInboundPolicy), FromDefault},
		ClusterNetworks:      Setting{prefixList(def.ClusterNetworks), FromDefault},
	}
	d, err := c.Kube.AppsV1().Deployments(ns).Get(ctx, DestinationDeployment, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		s.Source = fmt.Sprintf("Deployment %s/%s not found: destination's defaults", ns, DestinationDeployment)
		return s, nil
	}
	if err != nil {
		return Settings{}, fmt.Errorf("reading Deployment %s/%s: %w", ns, DestinationDeployment, err)
	}
	s.Source = fmt.Sprintf("Deployment %s/%s", ns, DestinationDeployment)
	args := containerArgs(d.Spec.Template.Spec.Containers)
	for _, f := range []struct {
		name string
		s    *Setting
	}{{"trust-domain", &s.TrustDomain}, {"default-inbound-policy", &s.DefaultInboundPolicy}, {"cluster-networks", &s.ClusterNetworks}} {
		if v, ok := flagValue(args, f.name); ok {
			*f.s = Setting{v, FromArgs}
		}
	}
	if _, err := s.Config(); err != nil {
		return Settings{}, fmt.Errorf("%s: %w", s.Source, err)
	}
	return s, nil
}

// Config is destination's configuration with s.
func (s Settings) Config() (destination.Config, error) {
	cfg := destination.DefaultConfig()
	cfg.TrustDomain = s.TrustDomain.Value
	cfg.DefaultInboundPolicy = policyv1alpha1.AccessPolicy(s.DefaultInboundPolicy.Value)
	cfg.ClusterNetworks = nil
	for _, v := range strings.Split(s.ClusterNetworks.Value, ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(v))
		if err != nil {
			return destination.Config{}, fmt.Errorf("--cluster-networks %q: want a CIDR: %w", v, err)
		}
		cfg.ClusterNetworks = append(cfg.ClusterNetworks, p)
	}
	if err := cfg.Validate(); err != nil {
		return destination.Config{}, fmt.Errorf("destination settings: %w", err)
	}
	return cfg, nil
}

// containerArgs are the command and args of the container named
// destination, else of the first.
func containerArgs(cs []corev1.Container) []string {
	if len(cs) == 0 {
		return nil
	}
	c := cs[0]
	for _, x := range cs {
		if x.Name == "destination" {
			c = x
		}
	}
	return append(append([]string{}, c.Command...), c.Args...)
}

// flagValue reads flag name as Go's flag package does (-name=v,
// --name=v, -name v, --name v; the last one wins), up to "--".
func flagValue(args []string, name string) (string, bool) {
	var val string
	found := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") {
			continue
		}
		n, v, eq := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-"), "=")
		if n != name {
			continue
		}
		if !eq {
			if i+1 >= len(args) {
				break
			}
			i++
			v = args[i]
		}
		val, found = v, true
	}
	return val, found
}

func prefixList(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
