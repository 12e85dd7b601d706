package vizcli

import (
	"fmt"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/plexus-mesh/plexus/viz/vizquery"
)

// PrometheusPath is the extension's Prometheus behind the API server's
// service proxy.
const PrometheusPath = "/api/v1/namespaces/" + vizquery.Namespace + "/services/http:" + vizquery.PrometheusService + ":9090/proxy"

// Prometheus returns a client of the extension's Prometheus that goes
// through the API server's service proxy with cfg's credentials: the
// caller needs no network path to the cluster's pods, and RBAC on
// services/proxy in plexus-viz governs who may ask.
func Prometheus(cfg *rest.Config) (*vizquery.Client, error) {
	base, _, err := rest.DefaultServerUrlFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("the API server's address: %w", err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("HTTP client for the API server: %w", err)
	}
	return vizquery.New(strings.TrimSuffix(base.String(), "/")+PrometheusPath, hc.Transport)
}
