package vizcli

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"

	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/viz/viznames"
)

// Names of the objects AllowScrapes writes.
const (
	ScrapeServer = "plexus-proxy-admin"
	ScrapeRoute  = "plexus-proxy-metrics"
	ScrapePolicy = "plexus-prometheus-scrape" // the AuthorizationPolicy and its NetworkAuthentication
)

// DefaultScrapeNetworks admit every address: Prometheus is not meshed, so
// its address is all that tells it apart, and that address is one of the
// cluster's pod network, which Plexus does not know.
var DefaultScrapeNetworks = []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("::/0")}

// ScrapeConfig says where to let Prometheus scrape.
type ScrapeConfig struct {
	Namespace string
	// Networks the scrapes may come from.
	Networks []netip.Prefix
}

// Validate reports what cannot be rendered.
func (c ScrapeConfig) Validate() error {
	var errs []error
	if c.Namespace == "" {
		errs = append(errs, errors.New("no namespace"))
	}
	if len(c.Networks) == 0 {
		errs = append(errs, errors.New("no networks"))
	}
	for _, n := range c.Networks {
		if !n.IsValid() || n != n.Masked() {
			errs = append(errs, fmt.Errorf("network %s: want a CIDR with no host bits set", n))
		}
	}
	return errors.Join(errs...)
}

// AllowScrapes writes the policy that lets the viz extension's Prometheus
// (not meshed: a plaintext client from the pod network) scrape every
// proxy's /metrics in c.Namespace whatever the default inbound policy:
// a Server on the admin port of every pod (accessPolicy deny), an
// HTTPRoute on it for GET /metrics alone, and an AuthorizationPolicy on
// that route requiring a NetworkAuthentication of c.Networks. The admin
// port's other paths stay closed; the kubelet's probes of /live and
// /ready keep passing (destination adds every pod's probe route).
func AllowScrapes(w io.Writer, c ScrapeConfig) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("allow-scrapes: %w", err)
	}
	labels := object{"app.kubernetes.io/part-of": "plexus-viz"}
	meta := func(name string) object {
		return object{"name": name, "namespace": c.Namespace, "labels": labels}
	}
	networks := make([]any, len(c.Networks))
	for i, n := range c.Networks {
		networks[i] = object{"cidr": n.String()}
	}
	objs := []object{
		{
			"apiVersion": policyv1alpha1.APIVersion, "kind": policyv1alpha1.ServerKind, "metadata": meta(ScrapeServer),
			"spec": object{
				"podSelector":   object{},
				"port":          viznames.AdminPort,
				"proxyProtocol": string(policyv1alpha1.ProtocolHTTP1),
				"accessPolicy":  string(policyv1alpha1.Deny),
			},
		},
		{
			"apiVersion": policyv1alpha1.GatewayGroup + "/v1", "kind": policyv1alpha1.HTTPRouteKind, "metadata": meta(ScrapeRoute),
			"spec": object{
				"parentRefs": []any{object{"group": policyv1alpha1.Group, "kind": policyv1alpha1.ServerKind, "name": ScrapeServer}},
				"rules": []any{object{"matches": []any{object{
					"path":   object{"type": "Exact", "value": "/metrics"},
					"method": "GET",
				}}}},
			},
		},
		{
			"apiVersion": policyv1alpha1.APIVersion, "kind": policyv1alpha1.NetworkAuthenticationKind, "metadata": meta(ScrapePolicy),
			"spec": object{"networks": networks},
		},
		{
			"apiVersion": policyv1alpha1.APIVersion, "kind": policyv1alpha1.AuthorizationPolicyKind, "metadata": meta(ScrapePolicy),
			"spec": object{
				"targetRef": object{"group": policyv1alpha1.GatewayGroup, "kind": policyv1alpha1.HTTPRouteKind, "name": ScrapeRoute},
				"requiredAuthenticationRefs": []any{
					object{"group": policyv1alpha1.Group, "kind": policyv1alpha1.NetworkAuthenticationKind, "name": ScrapePolicy},
				},
			},
		},
	}
	head := "# Lets the viz extension's Prometheus scrape the proxies of namespace " + c.Namespace + "\n" +
		"# (GET /metrics on port " + strconv.Itoa(viznames.AdminPort) + " from the networks below) whatever the\n" +
		"# default inbound policy; the admin port's other paths are closed to everyone.\n"
	if _, err := io.WriteString(w, head); err != nil {
		return err
	}
	return write(w, objs)
}
