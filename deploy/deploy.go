// Package deploy embeds the Kubernetes manifests in this folder, so that
// `plexusctl install` renders exactly what `kubectl apply -k` would apply.
package deploy

import "embed"

// Manifests holds crds/*.yaml, plexus-control/*.yaml, plexus-node/*.yaml
// and plexus-node-cleanup/*.yaml, which only an uninstall applies (the
// kustomization.yaml files among them are not Kubernetes objects).
//
//go:embed crds/*.yaml plexus-control/*.yaml plexus-node/*.yaml plexus-node-cleanup/*.yaml
var Manifests embed.FS
