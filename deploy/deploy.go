// Package deploy embeds the Kubernetes manifests in this folder, so that
// `plexusctl install` renders exactly what `kubectl apply -k` would apply
// (the Gateway API CRDs apart: `kubectl apply -k deploy/crds/gateway-api`
// installs them without install's check of what the cluster has).
package deploy

import "embed"

// Manifests holds crds/*.yaml, crds/gateway-api/*.yaml (the Gateway API
// CRDs Plexus needs, verbatim from sigs.k8s.io/gateway-api; install
// renders them only where that is safe), plexus-control/*.yaml,
// plexus-node/*.yaml, plexus-viz/*.yaml (the viz extension, rendered by
// `plexusctl viz install`), plexus-multicluster/*.yaml (the multicluster
// extension's) and plexus-node-cleanup/*.yaml, which only an
// uninstall applies (the kustomization.yaml files among them are not
// Kubernetes objects).
//
//go:embed crds/*.yaml crds/gateway-api/*.yaml plexus-control/*.yaml plexus-node/*.yaml plexus-node-cleanup/*.yaml plexus-viz/*.yaml plexus-multicluster/*.yaml
var Manifests embed.FS
