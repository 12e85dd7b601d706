// Package viznames names the viz extension's objects (deploy/plexus-viz):
// its namespace, Deployments and aggregated API, for the commands that
// install and check it and the servers that run in it.
package viznames

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
	// AdminPort is the proxy's admin port (ARCHITECTURE.md §2), which
	// Prometheus scrapes.
	AdminPort = 4191
)
