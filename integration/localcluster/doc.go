// Package localcluster holds the tests that prove the local Kubernetes
// cluster works (node, scheduling, Services, DNS, logs) and that
// cluster-down leaves nothing behind.
package localcluster
