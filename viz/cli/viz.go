// Package vizcli renders the viz extension's manifests for plexusctl viz
// (install, uninstall, allow-scrapes) and reads the kubectl-style
// resource arguments its commands take (ARCHITECTURE.md §10).
package vizcli
