// Package mesh holds the cluster tests of the mesh as a whole: the control
// plane deployed from deploy/ as pods, meshed workloads whose traffic the
// CNI plugin redirects, and mTLS between their proxies.
package mesh
