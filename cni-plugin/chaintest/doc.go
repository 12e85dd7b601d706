// Package chaintest holds the root-only tests and the ADD benchmark that run
// plexus-cni in a real CNI chain (bridge + host-local, then plexus-cni) on
// temporary network namespaces against a real kube-apiserver.
package chaintest
