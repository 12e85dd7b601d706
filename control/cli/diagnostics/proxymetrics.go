package diagnostics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/plexus-mesh/plexus/control/cli/portforward"
	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// ProxyMetrics prints proxies' Prometheus text as their admin port serves
// it. Its fields are what tests replace.
type ProxyMetrics struct {
	// Stat finds the pods (its Client) and scrapes them (its Scrape,
	// PortForwardScraper in production).
	Stat stat.Stat
}

// Run writes the metrics of the pod, or of every running meshed pod of
// the deployment, each then headed "# POD <namespace>/<name>". Pods that
// could not be scraped are reported in the error, after the others are
// written.
func (m ProxyMetrics) Run(ctx context.Context, w io.Writer, kind Kind, namespace, name string) error {
	targets, err := m.Stat.Targets(ctx, stat.Config{Resource: kind, Namespace: namespace, Name: name})
	if err != nil {
		return err
	}
	t := targets[0]
	what := fmt.Sprintf("%s %s/%s", kind, namespace, name)
	switch {
	case t.Meshed == 0 && kind == Pod:
		return fmt.Errorf("%s is not meshed: it has no %s container", what, meshpod.ProxyContainerName)
	case t.Total == 0:
		return fmt.Errorf("%s has no pods", what)
	case t.Meshed == 0:
		return fmt.Errorf("%s is not meshed: none of its %d pods has a %s container", what, t.Total, meshpod.ProxyContainerName)
	case len(t.Pods) == 0:
		return fmt.Errorf("%s: no meshed pod is running", what)
	}
	slices.SortFunc(t.Pods, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	var errs []error
	for _, p := range t.Pods {
		b, err := m.Stat.Scrape(ctx, p.Namespace, p.Name)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if kind != Pod {
			if _, err := fmt.Fprintf(w, "# POD %s/%s\n", p.Namespace, p.Name); err != nil {
				return err
			}
		}
		if len(b) > 0 && b[len(b)-1] != '\n' {
			b = append(b, '\n') // the next header starts a line
		}
		if _, err := w.Write(b); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// PortForwardScraper scrapes a proxy's /metrics through a port-forward to
// its admin port, as Linkerd's diagnostics do: the request arrives on the
// pod's loopback, which the proxy serves whatever the pod's inbound
// policy (a `deny` default included). It needs create on pods/portforward.
func PortForwardScraper(d portforward.PodDialer) stat.Scraper {
	return func(ctx context.Context, namespace, pod string) ([]byte, error) {
		res, body, err := d.Get(ctx, namespace, pod, proxyAdminPort, "/metrics")
		if err != nil {
			return nil, fmt.Errorf("scraping %s/%s:%d/metrics: %w", namespace, pod, proxyAdminPort, err)
		}
		if res.StatusCode != http.StatusOK {
			hint := ""
			if res.StatusCode == http.StatusForbidden {
				hint = " (its inbound policy refused a client on the pod's loopback: proxies before this version let loopback in only when a policy allows it; " +
					"authorize the admin port for it, e.g. a Server for port 4191 with an AuthorizationPolicy naming a NetworkAuthentication of 127.0.0.1/32 and ::1/128, or restart the pod on a newer proxy)"
			}
			return nil, fmt.Errorf("scraping %s/%s:%d/metrics: %s%s: %.200s", namespace, pod, proxyAdminPort, res.Status, hint, body)
		}
		return body, nil
	}
}

// proxyAdminPort is the proxy's admin port (ARCHITECTURE.md §2).
const proxyAdminPort = 4191
