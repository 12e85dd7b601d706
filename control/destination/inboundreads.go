package destination

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
)

// InboundReads are the reads the inbound policy computation does:
// answered by destination's caches, or by InboundObjects from objects a
// client listed. Lists are sorted by namespace, then name; the objects
// are shared, never modified.
type InboundReads interface {
	// Namespace returns the Namespace name, or nil.
	Namespace(name string) *corev1.Namespace
	// Servers returns the Servers of namespace ns.
	Servers(ns string) []*policyv1alpha1.Server
	// AuthorizationPolicies returns the AuthorizationPolicies of ns.
	AuthorizationPolicies(ns string) []*policyv1alpha1.AuthorizationPolicy
	// HTTPLocalRateLimitPolicies returns the rate limits of ns.
	HTTPLocalRateLimitPolicies(ns string) []*policyv1alpha1.HTTPLocalRateLimitPolicy
	// MeshTLSAuthentication returns ns/name.
	MeshTLSAuthentication(ns, name string) (*policyv1alpha1.MeshTLSAuthentication, bool)
	// NetworkAuthentication returns ns/name.
	NetworkAuthentication(ns, name string) (*policyv1alpha1.NetworkAuthentication, bool)
	// ServerHTTPRoutes returns the HTTPRoutes with a parentRef naming the
	// Server server ("ns/name"), each once.
	ServerHTTPRoutes(server string) []*gatewayv1.HTTPRoute
	// ServerGRPCRoutes returns the GRPCRoutes likewise.
	ServerGRPCRoutes(server string) []*gatewayv1.GRPCRoute
}

// inboundComputation computes inbound policies from reads with cfg's
// TrustDomain, DefaultInboundPolicy and ClusterNetworks; warn reports
// what it leaves out or chooses (slog key-value pairs).
type inboundComputation struct {
	reads InboundReads
	cfg   Config
	warn  func(msg string, args ...any)
}

// ComputeInboundPolicy computes the inbound policy of pod's port exactly
// as GetInboundPolicy sends it, from reads and cfg (DefaultConfig with
// the settings destination runs with: TrustDomain, DefaultInboundPolicy,
// ClusterNetworks). With a policy it may return an error: what
// destination logs while computing it (a malformed annotation, an
// AuthorizationPolicy that authorizes nobody, a route left out, a
// conflict and the object that won), one per line; the policy is still
// the one sent. Without a policy, cfg, pod or port is unusable.
func ComputeInboundPolicy(reads InboundReads, cfg Config, pod *corev1.Pod, port uint16) (*pb.InboundPolicy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("inbound policy: %w", err)
	}
	if pod == nil || port == 0 {
		return nil, errors.New("inbound policy: want a pod and a port 1-65535")
	}
	var warnings []string
	warn := func(msg string, args ...any) {
		if w := warningText(msg, args); !slices.Contains(warnings, w) {
			warnings = append(warnings, w)
		}
	}
	p := inboundComputation{reads: reads, cfg: cfg, warn: warn}.policy(pod, port)
	if len(warnings) > 0 {
		return p, errors.New(strings.Join(warnings, "\n"))
	}
	return p, nil
}

// warningText is msg followed by its key=value pairs, a value with
// spaces quoted.
func warningText(msg string, args []any) string {
	var b strings.Builder
	b.WriteString(msg)
	for i := 0; i+1 < len(args); i += 2 {
		v := fmt.Sprint(args[i+1])
		if strings.ContainsAny(v, " \t\n\"") || v == "" {
			v = strconv.Quote(v)
		}
		fmt.Fprintf(&b, " %v=%s", args[i], v)
	}
	return b.String()
}

// InboundObjects answers InboundReads from objects a client listed, as
// destination's caches answer them from the same objects.
type InboundObjects struct {
	namespaces map[string]*corev1.Namespace
	servers    map[string][]*policyv1alpha1.Server // by namespace
	authzs     map[string][]*policyv1alpha1.AuthorizationPolicy
	rateLimits map[string][]*policyv1alpha1.HTTPLocalRateLimitPolicy
	meshTLS    map[string]*policyv1alpha1.MeshTLSAuthentication // by "ns/name"
	networks   map[string]*policyv1alpha1.NetworkAuthentication
	httpRoutes map[string][]*gatewayv1.HTTPRoute // by Server parent "ns/name"
	grpcRoutes map[string][]*gatewayv1.GRPCRoute
}

// NewInboundObjects indexes objs: Namespaces, the policy.plexus.dev kinds,
// HTTPRoutes and GRPCRoutes, typed (policyv1alpha1.Decode turns what a
// dynamic client lists into them). Any other type is an error.
func NewInboundObjects(objs ...any) (*InboundObjects, error) {
	o := &InboundObjects{
		namespaces: map[string]*corev1.Namespace{},
		servers:    map[string][]*policyv1alpha1.Server{},
		authzs:     map[string][]*policyv1alpha1.AuthorizationPolicy{},
		rateLimits: map[string][]*policyv1alpha1.HTTPLocalRateLimitPolicy{},
		meshTLS:    map[string]*policyv1alpha1.MeshTLSAuthentication{},
		networks:   map[string]*policyv1alpha1.NetworkAuthentication{},
		httpRoutes: map[string][]*gatewayv1.HTTPRoute{},
		grpcRoutes: map[string][]*gatewayv1.GRPCRoute{},
	}
	for _, obj := range objs {
		switch t := obj.(type) {
		case *corev1.Namespace:
			o.namespaces[t.Name] = t
		case *policyv1alpha1.Server:
			o.servers[t.Namespace] = append(o.servers[t.Namespace], t)
		case *policyv1alpha1.AuthorizationPolicy:
			o.authzs[t.Namespace] = append(o.authzs[t.Namespace], t)
		case *policyv1alpha1.HTTPLocalRateLimitPolicy:
			o.rateLimits[t.Namespace] = append(o.rateLimits[t.Namespace], t)
		case *policyv1alpha1.MeshTLSAuthentication:
			o.meshTLS[t.Namespace+"/"+t.Name] = t
		case *policyv1alpha1.NetworkAuthentication:
			o.networks[t.Namespace+"/"+t.Name] = t
		case *gatewayv1.HTTPRoute:
			for _, srv := range sortedSet(serverParents(t.Spec.ParentRefs, t.Namespace)) {
				o.httpRoutes[srv] = append(o.httpRoutes[srv], t)
			}
		case *gatewayv1.GRPCRoute:
			for _, srv := range sortedSet(serverParents(t.Spec.ParentRefs, t.Namespace)) {
				o.grpcRoutes[srv] = append(o.grpcRoutes[srv], t)
			}
		default:
			return nil, fmt.Errorf("inbound objects: %T is not read by inbound policies", obj)
		}
	}
	sortAll(o.servers)
	sortAll(o.authzs)
	sortAll(o.rateLimits)
	sortAll(o.httpRoutes)
	sortAll(o.grpcRoutes)
	return o, nil
}

// sortAll sorts each list of m by namespace, then name.
func sortAll[T interface {
	GetNamespace() string
	GetName() string
}](m map[string][]T) {
	for _, objs := range m {
		sortByName(objs)
	}
}

func (o *InboundObjects) Namespace(name string) *corev1.Namespace { return o.namespaces[name] }

func (o *InboundObjects) Servers(ns string) []*policyv1alpha1.Server { return o.servers[ns] }

func (o *InboundObjects) AuthorizationPolicies(ns string) []*policyv1alpha1.AuthorizationPolicy {
	return o.authzs[ns]
}

func (o *InboundObjects) HTTPLocalRateLimitPolicies(ns string) []*policyv1alpha1.HTTPLocalRateLimitPolicy {
	return o.rateLimits[ns]
}

func (o *InboundObjects) MeshTLSAuthentication(ns, name string) (*policyv1alpha1.MeshTLSAuthentication, bool) {
	m, ok := o.meshTLS[ns+"/"+name]
	return m, ok
}

func (o *InboundObjects) NetworkAuthentication(ns, name string) (*policyv1alpha1.NetworkAuthentication, bool) {
	n, ok := o.networks[ns+"/"+name]
	return n, ok
}

func (o *InboundObjects) ServerHTTPRoutes(server string) []*gatewayv1.HTTPRoute {
	return o.httpRoutes[server]
}

func (o *InboundObjects) ServerGRPCRoutes(server string) []*gatewayv1.GRPCRoute {
	return o.grpcRoutes[server]
}

var (
	_ InboundReads = (*inbound)(nil)
	_ InboundReads = (*InboundObjects)(nil)
)
