// Package vizcli renders the viz extension's manifests for plexusctl viz
// (install, uninstall, allow-scrapes) and reads the kubectl-style
// resource arguments its commands take (DESIGN.md §10).
package vizcli

// Names of the extension (deploy/plexus-viz).
const (
	Namespace = "plexus-viz"
	// ManifestDir is the folder of deploy.Manifests holding the extension.
	ManifestDir = "plexus-viz"
	// APIService is the tap service's aggregated API.
	APIService = "v1alpha1.tap.plexus.dev"
	// The extension's Deployments.
	TapDeployment        = "plexus-tap"
	WebDeployment        = "plexus-web"
	PrometheusDeployment = "plexus-prometheus"
	// AdminPort is the proxy's admin port (DESIGN.md §2), which
	// Prometheus scrapes.
	AdminPort = 4191
)
