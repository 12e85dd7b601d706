// Package diagnostics is plexusctl diagnostics: a proxy's raw metrics
// fetched through a port-forward (ProxyMetrics), and the endpoints
// destination gives a proxy for a service port, asked of destination
// through a port-forward as a proxy asks (Endpoints), with, for
// comparison, what the EndpointSlices give by destination's rules
// (SliceEndpoints).
package diagnostics

import (
	"fmt"
	"strings"

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

// ParseKind accepts kubectl's names and short names.
func ParseKind(s string) (Kind, error) {
	switch strings.ToLower(s) {
	case "po", "pod", "pods":
		return Pod, nil
	case "deploy", "deployment", "deployments":
		return Deployment, nil
	}
	return "", fmt.Errorf("unknown kind %q: want po|pod or deploy|deployment", s)
}

// ParseTarget reads one object from kubectl-style arguments: KIND/NAME or
// KIND NAME.
func ParseTarget(args []string) (Kind, string, error) {
	kind, name, err := stat.SplitTarget(args)
	if err != nil {
		return "", "", err
	}
	k, err := ParseKind(kind)
	if err != nil {
		return "", "", err
	}
	return k, name, nil
}
