// Package manifest holds the checks on deploy/plexus-node: the DaemonSet's
// host mounts agree with its flags, its privileges stay minimal (the
// repair's three capabilities and no more), RBAC grants only what the
// plugin and the agent use (pod deletion only in the optional
// deploy/plexus-node-repair-delete), the ConfigMap is a config the plugin
// accepts, and deploy/plexus-node-cleanup reaches the same host dirs.
package manifest
