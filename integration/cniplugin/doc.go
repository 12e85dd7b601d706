// Package cniplugin holds the end-to-end tests of plexus-cni on the local
// cluster: the real kubelet and containerd run it as the last plugin of the
// primary conflist, and the tests check the rules in each pod's network
// namespace and send real traffic through them.
package cniplugin
