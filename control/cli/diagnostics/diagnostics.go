// Package diagnostics is plexusctl diagnostics: a proxy's raw metrics
// fetched through a port-forward (ProxyMetrics), and the endpoints
// destination gives a proxy for a service port, asked of destination
// through a port-forward as a proxy asks (Endpoints), with, for
// comparison, what the EndpointSlices give by destination's rules
// (SliceEndpoints).
package diagnostics

import (
	"github.com/plexus-mesh/plexus/control/cli/kinds"
	"github.com/plexus-mesh/plexus/control/cli/stat"
)

// Kind is a kind of object whose proxies ProxyMetrics reads: stat's
// resources, but namespaces.
type Kind = stat.Resource

// Kinds.
const (
	Pod        = stat.Pods
	Deployment = stat.Deployments
)

// ParseTarget reads one object from kubectl-style arguments: KIND/NAME or
// KIND NAME, a pod or a deployment.
func ParseTarget(args []string) (Kind, string, error) {
	k, name, err := kinds.ParseTarget(args, kinds.Pods, kinds.Deployments)
	return Kind(k.Singular()), name, err
}
