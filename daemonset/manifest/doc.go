// Package manifest holds the checks on deploy/plexus-node: the DaemonSet's
// host mounts agree with its flags, its privileges stay minimal, RBAC
// grants only what the plugin uses, the ConfigMap is a config the plugin
// accepts, and deploy/plexus-node-cleanup reaches the same host dirs.
package manifest
