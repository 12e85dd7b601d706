package kubeclient

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RemoteReady returns a check of whether the API server a linked
// cluster's kubeconfig names is ready (GET /readyz, which Kubernetes lets
// anyone read). Each check opens a connection of its own and closes it:
// a connection kept from a check that went unanswered (a blackhole) would
// wait out TCP's retransmission backoff, up to seconds after the server
// is back, and the informers' shared connection would hide a dead server
// until its pings time out.
func RemoteReady(kubeconfig []byte, userAgent string) (func(context.Context) error, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("remote cluster's kubeconfig: %w", err)
	}
	cfg.UserAgent = userAgent
	tlsConfig, err := rest.TLSConfigFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("remote cluster's API server TLS: %w", err)
	}
	rt, err := rest.HTTPWrappersForConfig(cfg, &http.Transport{TLSClientConfig: tlsConfig, DisableKeepAlives: true})
	if err != nil {
		return nil, fmt.Errorf("remote cluster's API server client: %w", err)
	}
	client := &http.Client{Transport: rt}
	url := strings.TrimSuffix(cfg.Host, "/") + "/readyz"
	return func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	}, nil
}
