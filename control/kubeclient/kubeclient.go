// Package kubeclient connects a control-plane service to the API server:
// in-cluster by default, or through a kubeconfig file.
package kubeclient

import (
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// New returns a clientset from kubeconfig (in-cluster when empty), naming
// itself userAgent to the API server.
func New(kubeconfig, userAgent string) (kubernetes.Interface, error) {
	cfg, err := Config(kubeconfig, userAgent)
	if err != nil {
		return nil, err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return c, nil
}

// Config returns the REST configuration from kubeconfig (in-cluster when
// empty), for clients other than the core clientset.
func Config(kubeconfig, userAgent string) (*rest.Config, error) {
	var cfg *rest.Config
	var err error
	if kubeconfig == "" {
		cfg, err = rest.InClusterConfig()
	} else {
		cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes configuration (kubeconfig %q; empty means in-cluster): %w", kubeconfig, err)
	}
	cfg.UserAgent = userAgent
	return cfg, nil
}

// RemoteTimeout bounds each request to a linked cluster's API server (a
// watch is a stream, and not bounded by it).
const RemoteTimeout = 10 * time.Second

// Remote returns a clientset of the API server a linked cluster's
// kubeconfig (the bytes of a multicluster credentials Secret) names,
// naming itself userAgent.
func Remote(kubeconfig []byte, userAgent string) (kubernetes.Interface, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("remote cluster's kubeconfig: %w", err)
	}
	cfg.Timeout = RemoteTimeout
	cfg.UserAgent = userAgent
	return kubernetes.NewForConfig(cfg)
}
