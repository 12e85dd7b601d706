package mccli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/meshstats"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// Gateway is one linked cluster's gateway as this cluster sees it.
type Gateway struct {
	Cluster string `json:"cluster"`
	// Address is where this cluster's proxies reach it; "" when the link
	// has none (flat mode only).
	Address string `json:"address,omitempty"`
	// Services counts the mirrors here in gateway mode.
	Services int `json:"services"`
	// Alive: every destination replica finds its health checks
	// answered ("yes"), one does not ("no"), or none says ("unknown").
	Alive string `json:"alive"`
	// LatencyMs is the slowest replica's last successful health check.
	LatencyMs float64 `json:"latencyMillis,omitempty"`
	// Errors name the destination replicas that could not be scraped.
	Errors []string `json:"errors,omitempty"`
}

// Scrape reads a destination pod's metrics (through the API server's pod
// proxy, in plexusctl).
type Scrape func(ctx context.Context, pod string) ([]byte, error)

// DestinationAdminPort is destination's admin port (its metrics).
const DestinationAdminPort = "9996"

// ProxyScrape scrapes destination pods in plexus-system through the API
// server.
func ProxyScrape(client kubernetes.Interface) Scrape {
	return func(ctx context.Context, pod string) ([]byte, error) {
		return client.CoreV1().Pods(controlNamespace).ProxyGet("http", pod, DestinationAdminPort, "/metrics", nil).DoRaw(ctx)
	}
}

const controlNamespace = "plexus-system"

// Gateways reports the gateway of every linked cluster: its address (the
// credentials), its gateway-mode mirrors, and what destination's health
// checks say (plexus_destination_gateway_healthy and _probe_seconds).
func Gateways(ctx context.Context, local kubernetes.Interface, scrape Scrape) ([]Gateway, error) {
	secrets, err := local.CoreV1().Secrets(mc.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("type", mc.CredentialsSecretType).String()})
	if err != nil {
		return nil, fmt.Errorf("listing the links' credentials in %s: %w", mc.Namespace, err)
	}
	byCluster := map[string]*Gateway{}
	var out []*Gateway
	for _, s := range secrets.Items {
		name := s.Labels[mc.ClusterNameLabel]
		if name == "" || byCluster[name] != nil {
			continue
		}
		g := &Gateway{Cluster: name, Address: s.Annotations[mc.GatewayAddressAnnotation], Alive: "unknown"}
		byCluster[name] = g
		out = append(out, g)
		mirrors, err := local.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: mc.GatewayLabel + "=" + name})
		if err != nil {
			return nil, fmt.Errorf("listing the gateway-mode mirrors of cluster %s: %w", name, err)
		}
		g.Services = len(mirrors.Items)
	}
	dests, err := local.CoreV1().Pods(controlNamespace).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=plexus-destination"})
	if err != nil {
		return nil, fmt.Errorf("listing destination's pods: %w", err)
	}
	for _, p := range dests.Items {
		text, err := scrape(ctx, p.Name)
		var families map[string]*dtoFamily
		if err == nil {
			families, err = parse(text)
		}
		if err != nil {
			for _, g := range out {
				g.Errors = append(g.Errors, p.Name+": "+err.Error())
			}
			continue
		}
		for _, g := range out {
			healthy, ok := families["plexus_destination_gateway_healthy"].value(g.Cluster)
			switch {
			case !ok:
			case healthy == 0:
				g.Alive = "no"
			case g.Alive == "unknown":
				g.Alive = "yes"
			}
			if lat, ok := families["plexus_destination_gateway_probe_seconds"].value(g.Cluster); ok {
				g.LatencyMs = max(g.LatencyMs, lat*1000)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Cluster < out[j].Cluster })
	res := make([]Gateway, len(out))
	for i, g := range out {
		res[i] = *g
	}
	return res, nil
}

// dtoFamily is one metric family's values by cluster label.
type dtoFamily struct{ byCluster map[string]float64 }

func (f *dtoFamily) value(cluster string) (float64, bool) {
	if f == nil {
		return 0, false
	}
	v, ok := f.byCluster[cluster]
	return v, ok
}

// parse keeps the gauges labelled by cluster.
func parse(text []byte) (map[string]*dtoFamily, error) {
	families, err := meshstats.ParseText(text)
	if err != nil {
		return nil, err
	}
	out := map[string]*dtoFamily{}
	for name, f := range families {
		if !strings.HasPrefix(name, "plexus_destination_gateway_") {
			continue
		}
		d := &dtoFamily{byCluster: map[string]float64{}}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cluster" {
					v := m.GetGauge().GetValue()
					if m.GetGauge() == nil {
						v = m.GetUntyped().GetValue()
					}
					d.byCluster[l.GetValue()] = v
				}
			}
		}
		out[name] = d
	}
	return out, nil
}

// PrintGateways writes gs as a table, or as JSON with format "json".
func PrintGateways(w io.Writer, gs []Gateway, format string) error {
	if format == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(gs)
	}
	tw := tabwriter.NewWriter(w, 0, 8, 3, ' ', 0)
	fmt.Fprintln(tw, "CLUSTER\tGATEWAY\tALIVE\tSERVICES\tLATENCY")
	for _, g := range gs {
		addr, lat := g.Address, "-"
		if addr == "" {
			addr = "(none)"
		}
		if g.LatencyMs > 0 {
			lat = (time.Duration(g.LatencyMs * float64(time.Millisecond))).Round(10 * time.Microsecond).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\n", g.Cluster, addr, g.Alive, g.Services, lat)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, g := range gs {
		for _, e := range g.Errors {
			fmt.Fprintf(w, "%s: destination replica not read: %s\n", g.Cluster, e)
		}
	}
	return nil
}
