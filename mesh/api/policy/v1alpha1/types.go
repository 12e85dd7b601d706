// Package policyv1alpha1 holds the authorization-policy resources of
// policy.plexus.dev/v1alpha1 (ARCHITECTURE.md §9), as plain structs mirroring the
// CRDs in deploy/crds/policy-*.yaml, read from dynamic informers with
// Decode. The API server validates them (schemas and CEL rules); what it
// cannot check is noted on the field.
package policyv1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// GroupVersion is policy.plexus.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

// The resources, for dynamic clients and informers.
var (
	ServerResource                   = GroupVersion.WithResource("servers")
	AuthorizationPolicyResource      = GroupVersion.WithResource("authorizationpolicies")
	MeshTLSAuthenticationResource    = GroupVersion.WithResource("meshtlsauthentications")
	NetworkAuthenticationResource    = GroupVersion.WithResource("networkauthentications")
	HTTPLocalRateLimitPolicyResource = GroupVersion.WithResource("httplocalratelimitpolicies")
)

// The group, apiVersion and kinds as written in manifests, and the other
// groups and kinds a reference may name.
const (
	Group      = "policy.plexus.dev"
	APIVersion = "policy.plexus.dev/v1alpha1"

	ServerKind                   = "Server"
	AuthorizationPolicyKind      = "AuthorizationPolicy"
	MeshTLSAuthenticationKind    = "MeshTLSAuthentication"
	NetworkAuthenticationKind    = "NetworkAuthentication"
	HTTPLocalRateLimitPolicyKind = "HTTPLocalRateLimitPolicy"

	GatewayGroup       = "gateway.networking.k8s.io"
	HTTPRouteKind      = "HTTPRoute"
	GRPCRouteKind      = "GRPCRoute"
	NamespaceKind      = "Namespace"
	ServiceAccountKind = "ServiceAccount"
)

// ProxyProtocol is how the proxy reads a Server's traffic.
type ProxyProtocol string

// The proxy protocols; ProtocolUnknown (detect HTTP) when unset.
const (
	ProtocolUnknown ProxyProtocol = "unknown"
	ProtocolHTTP1   ProxyProtocol = "HTTP/1"
	ProtocolHTTP2   ProxyProtocol = "HTTP/2"
	ProtocolGRPC    ProxyProtocol = "gRPC"
	ProtocolOpaque  ProxyProtocol = "opaque"
	ProtocolTLS     ProxyProtocol = "TLS"
)

// ProxyProtocols lists every ProxyProtocol, in the CRD's order.
func ProxyProtocols() []ProxyProtocol {
	return []ProxyProtocol{ProtocolUnknown, ProtocolHTTP1, ProtocolHTTP2, ProtocolGRPC, ProtocolOpaque, ProtocolTLS}
}

// AccessPolicy is what happens to traffic no AuthorizationPolicy allows:
// a Server's accessPolicy, and the values of the default inbound policy
// (install setting and config.plexus.dev/default-inbound-policy).
type AccessPolicy string

// The access policies.
const (
	AllUnauthenticated     AccessPolicy = "all-unauthenticated"
	AllAuthenticated       AccessPolicy = "all-authenticated"
	ClusterAuthenticated   AccessPolicy = "cluster-authenticated"
	ClusterUnauthenticated AccessPolicy = "cluster-unauthenticated"
	Deny                   AccessPolicy = "deny"
	Audit                  AccessPolicy = "audit"
)

// DefaultServerAccessPolicy is a Server's accessPolicy when unset, as in
// Linkerd. (The default inbound policy of a pod no Server selects is
// AllUnauthenticated unless configured.)
const DefaultServerAccessPolicy = Deny

// AccessPolicies lists every AccessPolicy, in the CRD's order.
func AccessPolicies() []AccessPolicy {
	return []AccessPolicy{AllUnauthenticated, AllAuthenticated, ClusterAuthenticated, ClusterUnauthenticated, Deny, Audit}
}

// Server is a port of the pods a selector picks in its namespace.
type Server struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ServerSpec `json:"spec"`
}

// ServerSpec is a Server's spec.
type ServerSpec struct {
	// PodSelector picks pods of the Server's namespace; empty: every pod.
	PodSelector metav1.LabelSelector `json:"podSelector"`
	// Port is a number (1-65535) or the name of a container port.
	Port intstr.IntOrString `json:"port"`
	// ProxyProtocol is ProtocolUnknown when unset (the API server
	// defaults it).
	ProxyProtocol ProxyProtocol `json:"proxyProtocol,omitempty"`
	// AccessPolicy is DefaultServerAccessPolicy when unset (the API server
	// defaults it).
	AccessPolicy AccessPolicy `json:"accessPolicy,omitempty"`
}

// AuthorizationPolicy allows traffic to its target from the clients that
// meet every required authentication.
type AuthorizationPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              AuthorizationPolicySpec `json:"spec"`
}

// AuthorizationPolicySpec is an AuthorizationPolicy's spec.
type AuthorizationPolicySpec struct {
	// TargetRef is a Server, an HTTPRoute, a GRPCRoute or a Namespace,
	// which must be the policy's own: the API server cannot check that
	// (Linkerd's webhook refuses any other), so a reader must ignore a
	// policy that targets another Namespace.
	TargetRef TargetRef `json:"targetRef"`
	// RequiredAuthenticationRefs must all be met: at most one
	// MeshTLSAuthentication or ServiceAccount, at most one
	// NetworkAuthentication. Empty allows every client; it is required
	// all the same, so write an empty slice, not nil.
	RequiredAuthenticationRefs []NamespacedTargetRef `json:"requiredAuthenticationRefs"`
}

// MeshTLSAuthentication is a set of mTLS identities: exactly one of
// Identities and IdentityRefs is set, and not empty.
type MeshTLSAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              MeshTLSAuthenticationSpec `json:"spec"`
}

// MeshTLSAuthenticationSpec is a MeshTLSAuthentication's spec.
type MeshTLSAuthenticationSpec struct {
	// Identities are exact SPIFFE IDs, "*.<DNS name>" or "*".
	Identities []string `json:"identities,omitempty"`
	// IdentityRefs are ServiceAccounts and Namespaces (every
	// ServiceAccount in one).
	IdentityRefs []IdentityRef `json:"identityRefs,omitempty"`
}

// NetworkAuthentication is a set of client networks.
type NetworkAuthentication struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              NetworkAuthenticationSpec `json:"spec"`
}

// NetworkAuthenticationSpec is a NetworkAuthentication's spec.
type NetworkAuthenticationSpec struct {
	// Networks holds at least one network.
	Networks []Network `json:"networks"`
}

// Network is a CIDR less its exceptions, each strictly inside it; each
// may also be one address (ParsePrefix reads both forms).
type Network struct {
	CIDR   string   `json:"cidr"`
	Except []string `json:"except,omitempty"`
}

// HTTPLocalRateLimitPolicy limits the request rate of a Server's
// proxies, each on its own: at least one of Total, Identity and Overrides
// is set; Identity and every override are at most Total.
type HTTPLocalRateLimitPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              HTTPLocalRateLimitPolicySpec `json:"spec"`
}

// HTTPLocalRateLimitPolicySpec is an HTTPLocalRateLimitPolicy's spec.
type HTTPLocalRateLimitPolicySpec struct {
	// TargetRef is a Server.
	TargetRef TargetRef `json:"targetRef"`
	// Total limits all clients together.
	Total *Limit `json:"total,omitempty"`
	// Identity limits each client identity.
	Identity *Limit `json:"identity,omitempty"`
	// Overrides limit named clients.
	Overrides []Override `json:"overrides,omitempty"`
}

// Limit is a rate, at least 1.
type Limit struct {
	RequestsPerSecond int32 `json:"requestsPerSecond"`
}

// Override is the limit of the clients it names (ServiceAccounts).
type Override struct {
	RequestsPerSecond int32         `json:"requestsPerSecond"`
	ClientRefs        []IdentityRef `json:"clientRefs"`
}

// TargetRef names an object in the referrer's namespace (or a Namespace).
// Group "" and "core" both name the core group.
type TargetRef struct {
	Group string `json:"group,omitempty"`
	Kind  string `json:"kind"`
	Name  string `json:"name"`
}

// NamespacedTargetRef is a TargetRef that may name another namespace;
// empty Namespace: the referrer's.
type NamespacedTargetRef struct {
	Group     string `json:"group,omitempty"`
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// IdentityRef names a ServiceAccount (empty Namespace: the referrer's) or,
// in a MeshTLSAuthentication, a Namespace.
type IdentityRef struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
}

// IsKind reports whether r names kind in group; "" and "core" are the
// same group.
func (r TargetRef) IsKind(group, kind string) bool {
	return r.Kind == kind && sameGroup(r.Group, group)
}

// IsKind reports whether r names kind in group; "" and "core" are the
// same group.
func (r NamespacedTargetRef) IsKind(group, kind string) bool {
	return r.Kind == kind && sameGroup(r.Group, group)
}

func sameGroup(a, b string) bool {
	if a == "core" {
		a = ""
	}
	if b == "core" {
		b = ""
	}
	return a == b
}
