// Package destination is the control plane's discovery service: it watches
// Services, EndpointSlices and Pods and streams to proxies the endpoints
// (with identity, protocol hint and metric labels) and the profile behind a
// service name, ClusterIP or pod IP.
//
// Design: shared informers feed a watcher whose event handlers only put keys
// on a work queue (they never block); workers recompute the address set of
// the affected per-service-port (or per-pod-IP-port) publishers from the
// informer caches and fan the differences out to per-stream translators.
// Each translator has a bounded queue: a stream that cannot keep up is ended
// with codes.ResourceExhausted (its proxy reconnects and gets a fresh
// snapshot) and counted, so one slow reader never holds up a publisher.
package destination

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// Defaults.
const (
	DefaultClusterDomain = "cluster.local"
	DefaultQueueSize     = 100
	DefaultWorkers       = 2
	// DefaultMaxStreamsPerIdentity bounds the open streams of one mesh
	// identity: every proxy of a service account together (replicas
	// share it), so it is sized for many replicas each following dozens
	// of destinations.
	DefaultMaxStreamsPerIdentity = 2000
	// DefaultMaxLoopbackStreams bounds the open streams of every caller
	// on destination's loopback together (port-forwards of operators).
	DefaultMaxLoopbackStreams = 100
	// DefaultInboundPolicy is the default inbound policy of the cluster
	// (ARCHITECTURE.md §9).
	DefaultInboundPolicy = policyv1alpha1.AllUnauthenticated
)

// DefaultClusterNetworks are the networks of the cluster-* policies when
// none are configured: Linkerd's clusterNetworks default (the private
// ranges and the shared address space), as plexusctl install's.
func DefaultClusterNetworks() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("100.64.0.0/10"), netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"), netip.MustParsePrefix("fd00::/8"),
	}
}

// Config configures a Server.
type Config struct {
	// ClusterDomain is the DNS suffix of service names, "cluster.local".
	ClusterDomain string
	// TrustDomain is the trust domain of the endpoints' SPIFFE identities.
	TrustDomain string
	// QueueSize bounds the updates waiting to be sent on one stream; a
	// stream whose queue overflows is ended with ResourceExhausted.
	QueueSize int
	// Workers is the number of goroutines recomputing publishers.
	Workers int
	// DefaultInboundPolicy applies to a pod port no Server selects, unless
	// the pod's or its namespace's config.plexus.dev/default-inbound-policy
	// says otherwise.
	DefaultInboundPolicy policyv1alpha1.AccessPolicy
	// ClusterNetworks are the client networks of the cluster-* policies.
	ClusterNetworks []netip.Prefix
	// VerifyInboundCaller: GetInboundPolicy answers only a caller whose
	// verified TLS client certificate names the pod's service account
	// (else PermissionDenied). Only a server without TLS (tests) turns it
	// off.
	VerifyInboundCaller bool
	// RequireCallerIdentity: StreamInterceptor refuses (Unauthenticated)
	// a caller that presents no verified client certificate, unless it
	// connects on loopback. Only a server without TLS (tests) turns it
	// off; it then counts such callers' streams by address.
	RequireCallerIdentity bool
	// MaxStreamsPerIdentity bounds the streams open at once by one
	// caller identity (or, without RequireCallerIdentity, one address
	// without a certificate); StreamInterceptor refuses more with
	// ResourceExhausted.
	MaxStreamsPerIdentity int
	// MaxLoopbackStreams bounds the streams open at once by all callers
	// on loopback without a certificate together.
	MaxLoopbackStreams int
	// StatusLease elects the replica that writes route status.
	StatusLease StatusLease
	// RemoteClustersNamespace holds the linked clusters' credentials
	// Secrets (remote.go); "" turns remote discovery off.
	RemoteClustersNamespace string
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		ClusterDomain: DefaultClusterDomain,
		TrustDomain:   spiffe.DefaultTrustDomain,
		QueueSize:     DefaultQueueSize,
		Workers:       DefaultWorkers,

		DefaultInboundPolicy: DefaultInboundPolicy,
		ClusterNetworks:      DefaultClusterNetworks(),
		VerifyInboundCaller:  true,

		RequireCallerIdentity: true,
		MaxStreamsPerIdentity: DefaultMaxStreamsPerIdentity,
		MaxLoopbackStreams:    DefaultMaxLoopbackStreams,

		RemoteClustersNamespace: mc.Namespace,
	}
}

// Validate reports every problem with c.
func (c Config) Validate() error {
	var errs []error
	if c.ClusterDomain == "" || strings.HasPrefix(c.ClusterDomain, ".") || strings.HasSuffix(c.ClusterDomain, ".") {
		errs = append(errs, fmt.Errorf("cluster domain %q: must be a non-empty DNS suffix without leading or trailing dot", c.ClusterDomain))
	}
	if c.TrustDomain == "" || strings.ContainsAny(c.TrustDomain, "/:@ ") {
		errs = append(errs, fmt.Errorf("trust domain %q: must be a non-empty host name", c.TrustDomain))
	}
	if c.QueueSize < 1 {
		errs = append(errs, fmt.Errorf("queue size %d: must be at least 1", c.QueueSize))
	}
	if c.MaxStreamsPerIdentity < 1 {
		errs = append(errs, fmt.Errorf("max streams per identity %d: must be at least 1", c.MaxStreamsPerIdentity))
	}
	if c.MaxLoopbackStreams < 1 {
		errs = append(errs, fmt.Errorf("max loopback streams %d: must be at least 1", c.MaxLoopbackStreams))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers %d: must be at least 1", c.Workers))
	}
	if !slices.Contains(policyv1alpha1.AccessPolicies(), c.DefaultInboundPolicy) {
		errs = append(errs, fmt.Errorf("default inbound policy %q: want one of %v", c.DefaultInboundPolicy, policyv1alpha1.AccessPolicies()))
	}
	if err := c.StatusLease.validate(); err != nil {
		errs = append(errs, err)
	}
	if len(c.ClusterNetworks) == 0 {
		errs = append(errs, errors.New("cluster networks: at least one is needed (none would let cluster-* policies allow any address)"))
	}
	for _, n := range c.ClusterNetworks {
		if !n.IsValid() || n != n.Masked() {
			errs = append(errs, fmt.Errorf("cluster network %s: want a valid CIDR without host bits", n))
		}
	}
	return errors.Join(errs...)
}
