// Package multiclusterv1alpha1 holds the multicluster extension's resource
// (multicluster.plexus.dev/v1alpha1 Link, the CRD in
// deploy/plexus-multicluster/link-crd.yaml) and the names the extension
// and the destination service agree on: the label that exports a Service,
// those a mirror carries, and the Secret that holds a link's credentials.
// Plain structs, read from dynamic informers with Decode; the API server
// validates them (schema and CEL rules).
package multiclusterv1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is multicluster.plexus.dev/v1alpha1.
var GroupVersion = schema.GroupVersion{Group: Group, Version: "v1alpha1"}

// LinkResource is the links resource, for dynamic clients and informers.
var LinkResource = GroupVersion.WithResource("links")

// The group, apiVersion and kind as written in manifests.
const (
	Group      = "multicluster.plexus.dev"
	APIVersion = "multicluster.plexus.dev/v1alpha1"
	LinkKind   = "Link"
)

// Link is this cluster's link to another (the remote, "target" cluster):
// how to reach its API server, and which of its Services to mirror here.
type Link struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   LinkSpec   `json:"spec"`
	Status LinkStatus `json:"status,omitempty"`
}

// LinkSpec is what the operator (plexusctl multicluster link) writes.
type LinkSpec struct {
	// ClusterName names the remote cluster: mirrors are <service>-<name>.
	// A DNS label of at most MaxClusterNameLength characters.
	ClusterName string `json:"clusterName"`
	// CredentialsSecret is a Secret in the Link's namespace, of type
	// CredentialsSecretType, whose key CredentialsKey holds a kubeconfig
	// for the remote API server.
	CredentialsSecret string `json:"credentialsSecret"`
	// RemoteDiscoverySelector selects the remote Services mirrored. Each
	// is mirrored in gateway mode when its ExportedLabel is
	// ExportedGateway, else in remote-discovery (flat) mode: the local
	// proxies reach their pods directly. Default: ExportedLabel in
	// (ExportedRemoteDiscovery, ExportedGateway).
	RemoteDiscoverySelector *metav1.LabelSelector `json:"remoteDiscoverySelector,omitempty"`
}

// LinkStatus is what the controller reports.
type LinkStatus struct {
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: ConditionCredentialsValid, ConditionRemoteReachable,
	// ConditionTrustVerified and ConditionReady.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// MirrorServices: one per remote Service selected, sorted by remote
	// namespace and name.
	MirrorServices []MirrorStatus `json:"mirrorServices,omitempty"`
}

// MirrorStatus is one remote Service's mirror.
type MirrorStatus struct {
	RemoteRef ObjectRef `json:"remoteRef"`
	LocalRef  ObjectRef `json:"localRef"`
	// Conditions: ConditionMirrored.
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ObjectRef names a namespaced object.
type ObjectRef struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// MaxClusterNameLength keeps a mirror's name, <service>-<cluster>, within
// a DNS label for services of up to 32 characters.
const MaxClusterNameLength = 30

// The conditions' types.
const (
	ConditionCredentialsValid = "CredentialsValid"
	ConditionRemoteReachable  = "RemoteReachable"
	ConditionReady            = "Ready"
	// ConditionTrustVerified: both clusters' proxies trust a common
	// anchor (False refuses the Link: nothing is mirrored).
	ConditionTrustVerified = "TrustVerified"
	ConditionMirrored      = "Mirrored"
)

// Labels, annotations and the Secret type the extension and destination
// share.
const (
	// ExportedLabel on a Service exports it to the clusters linked to this
	// one; ExportedRemoteDiscovery is flat mode (their proxies reach its
	// pods directly), ExportedGateway gateway mode (through this cluster's
	// gateway, which passes their mTLS through: mesh/passthrough).
	// ExportedFederated makes the Service a member of a federated
	// Service: one Service spanning every cluster that exports a Service
	// of its namespace and name so, this one included (FederatedLabel).
	ExportedLabel           = "mirror.plexus.dev/exported"
	ExportedRemoteDiscovery = "remote-discovery"
	ExportedGateway         = "gateway"
	ExportedFederated       = "federated"

	// MirroredServiceLabel marks a mirror; ClusterNameLabel, LinkLabel and
	// RemoteNameLabel say of what. RemoteDiscoveryLabel, the remote
	// cluster's name, tells destination to answer for the mirror with
	// the remote Service's endpoints (RemoteNameLabel, same namespace).
	MirroredServiceLabel = "mirror.plexus.dev/mirrored-service"
	ClusterNameLabel     = "mirror.plexus.dev/cluster-name"
	RemoteNameLabel      = "mirror.plexus.dev/remote-name"
	LinkLabel            = "multicluster.plexus.dev/link"
	RemoteDiscoveryLabel = "multicluster.plexus.dev/remote-discovery"
	// GatewayLabel, the remote cluster's name, on a mirror of a Service
	// exported in gateway mode: destination answers with the same remote
	// endpoints, each reached through that cluster's gateway
	// (GatewayAddressAnnotation of its credentials Secret).
	GatewayLabel = "multicluster.plexus.dev/gateway"
	// FederatedLabel, the members' name, marks the federated Service
	// <name>-federated the service mirror keeps in a namespace where this
	// cluster or a linked one exports a Service <name> as
	// ExportedFederated. FederatedClustersAnnotation lists the linked
	// clusters whose member it spans (comma-separated, sorted); this
	// cluster's own member counts while it is exported so. Destination
	// answers it flat: with every member's endpoints at their own
	// addresses.
	FederatedLabel              = "multicluster.plexus.dev/federated"
	FederatedClustersAnnotation = "multicluster.plexus.dev/federated-clusters"
	// FederatedSuffix ends a federated Service's name.
	FederatedSuffix = "-federated"

	// CredentialsSecretType is the type of a Secret holding a remote
	// cluster's kubeconfig in CredentialsKey; ClusterNameLabel names the
	// cluster, TrustDomainAnnotation its trust domain (default: the local
	// one).
	CredentialsSecretType = "multicluster.plexus.dev/remote-kubeconfig"
	CredentialsKey        = "kubeconfig"
	TrustDomainAnnotation = "multicluster.plexus.dev/trust-domain"
	// MirrorSliceManager is the managed-by label of the EndpointSlice the
	// service mirror keeps for a headless mirror: the remote pods'
	// addresses, for which destination answers with the remote pods.
	MirrorSliceManager = "service-mirror.multicluster.plexus.dev"

	// GatewayAddressAnnotation on a credentials Secret: ip:port of the
	// remote cluster's gateway as this cluster's pods reach it.
	GatewayAddressAnnotation = "multicluster.plexus.dev/gateway-address"

	// Namespace is where the extension runs and keeps Links and their
	// Secrets.
	Namespace = "plexus-multicluster"
)
