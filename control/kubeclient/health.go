package kubeclient

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RemoteReady returns a check of whether the API server a linked
// cluster's kubeconfig names is ready (GET /readyz, which Kubernetes lets
// anyone read). Each check opens a connection of its own and closes it,
// so a server that went silent fails at once and one that came back
// passes at once: a check never waits behind a connection the informers
// share.
func RemoteReady(kubeconfig []byte, userAgent string) (func(context.Context) error, error) {
	cfg, err := clientcmd.RESTConfigFromKubeConfig(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("remote cluster's kubeconfig: %w", err)
	}
	cfg.UserAgent = userAgent
	var d net.Dialer
	cfg.Dial = d.DialContext // a transport of its own, not the cached shared one
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("remote cluster's API server client: %w", err)
	}
	url := strings.TrimSuffix(cfg.Host, "/") + "/readyz"
	return func(ctx context.Context) error {
		defer client.CloseIdleConnections()
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
