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
	"strings"

	"github.com/plexus-mesh/plexus/control/spiffe"
)

// Defaults.
const (
	DefaultClusterDomain = "cluster.local"
	DefaultQueueSize     = 100
	DefaultWorkers       = 2
)

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
}

// DefaultConfig returns the configuration with every default filled in.
func DefaultConfig() Config {
	return Config{
		ClusterDomain: DefaultClusterDomain,
		TrustDomain:   spiffe.DefaultTrustDomain,
		QueueSize:     DefaultQueueSize,
		Workers:       DefaultWorkers,
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
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("workers %d: must be at least 1", c.Workers))
	}
	return errors.Join(errs...)
}
