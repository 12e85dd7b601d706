package vizquery

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// Source names of clients whose workload cannot be known.
const (
	// Unmeshed is the source of requests without a mesh identity.
	Unmeshed = "unmeshed"
	// KindServiceAccount is the source kind when a client's identity maps
	// to no workload, or to several (the name is the service account).
	KindServiceAccount = "ServiceAccount"
)

// Workload is one end of an edge. A source without an identity has the
// name Unmeshed and no namespace or kind. A source in another cluster
// (multicluster: its identity is of another trust domain than the
// destination's) is its service account, with Cluster that trust domain.
type Workload struct {
	Cluster   string `json:"cluster,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Kind      string `json:"kind,omitempty"`
	Name      string `json:"name"`
}

// String is namespace/kind/name, or the name alone; cluster: before it
// for another cluster's.
func (w Workload) String() string {
	s := w.Name
	if w.Kind != "" {
		s = w.Namespace + "/" + w.Kind + "/" + w.Name
	}
	if w.Cluster != "" {
		s = w.Cluster + ":" + s
	}
	return s
}

// Edge is traffic from one source to one destination workload, as the
// destination's proxies saw it.
type Edge struct {
	Source      Workload `json:"source"`
	Destination Workload `json:"destination"`
	// ClientID and ServerID are the SPIFFE identities of the two ends
	// ("" when not over mesh TLS); Secured says mesh TLS carried it.
	ClientID string `json:"clientId,omitempty"`
	ServerID string `json:"serverId,omitempty"`
	Secured  bool   `json:"secured"`
	// Protocol is "http" when HTTP requests were seen, else "tcp".
	Protocol string `json:"protocol"`
	// RPS are HTTP requests per second over the window; ConnectionsPerSec,
	// connections opened per second; OpenConnections, open now.
	RPS               float64 `json:"rps"`
	ConnectionsPerSec float64 `json:"connectionsPerSec"`
	OpenConnections   float64 `json:"openConnections"`
}

// Identity names the edge apart from its numbers: two series or two
// namespaces' answers with one Identity are one edge.
func (e Edge) Identity() string {
	return fmt.Sprint(e.Source, e.Destination, e.ClientID, e.ServerID, e.Secured)
}

// SortEdges orders edges by source, destination and client identity.
func SortEdges(es []Edge) {
	sort.SliceStable(es, func(i, j int) bool {
		a, b := es[i], es[j]
		if a.Source != b.Source {
			return a.Source.String() < b.Source.String()
		}
		if a.Destination != b.Destination {
			return a.Destination.String() < b.Destination.String()
		}
		return a.ClientID < b.ClientID
	})
}

type edgeKey struct {
	dst                     Workload
	clientID, serverID, tls string
}

// Edges returns the edges into or out of namespace ns with traffic in
// the last window or connections open now, sorted by source and
// destination. Sources are found from the client's identity: the
// workloads whose pods run as its service account (kube lists them).
func (c *Client) Edges(ctx context.Context, kube kubernetes.Interface, ns string, window time.Duration) ([]Edge, error) {
	vs, err := c.vectors(ctx, qEdgesHTTP(ns, window), qEdgesTCP(ns, window), qEdgesOpen(ns))
	if err != nil {
		return nil, err
	}
	acc := map[edgeKey]*Edge{}
	var order []edgeKey
	for i, vec := range vs {
		for _, s := range vec {
			m := s.Metric
			k := edgeKey{
				dst:      Workload{Namespace: string(m[labelNamespace]), Kind: string(m[labelWorkloadKind]), Name: string(m[labelWorkloadName])},
				clientID: string(m[labelClientID]), serverID: string(m[labelServerID]), tls: string(m[labelTLS]),
			}
			e := acc[k]
			if e == nil {
				e = &Edge{Destination: k.dst, ClientID: k.clientID, ServerID: k.serverID, Secured: k.tls == "true", Protocol: "tcp"}
				acc[k] = e
				order = append(order, k)
			}
			switch v := value(s.Value); i {
			case 0:
				e.RPS += v
				e.Protocol = "http"
			case 1:
				e.ConnectionsPerSec += v
			case 2:
				e.OpenConnections += v
			}
		}
	}
	r := resolver{kube: kube, pods: map[string][]corev1.Pod{}}
	merged := map[string]*Edge{}
	var out []*Edge
	for _, k := range order {
		e := acc[k]
		if e.Source, err = r.source(ctx, e.ClientID, e.ServerID); err != nil {
			return nil, err
		}
		if e.ServerID == "" && e.Secured {
			if e.ServerID, err = r.serverID(ctx, e.Destination, e.ClientID); err != nil {
				return nil, err
			}
		}
		// Series that differ only in labels the edge does not show (a
		// server_id the proxy left empty) are one edge.
		id := e.Identity()
		if m := merged[id]; m != nil {
			m.RPS += e.RPS
			m.ConnectionsPerSec += e.ConnectionsPerSec
			m.OpenConnections += e.OpenConnections
			if e.Protocol == "http" {
				m.Protocol = "http"
			}
			continue
		}
		merged[id] = e
		out = append(out, e)
	}
	edges := make([]Edge, len(out))
	for i, e := range out {
		edges[i] = *e
	}
	SortEdges(edges)
	return edges, nil
}

// resolver maps identities to workloads, listing each namespace's pods
// once.
type resolver struct {
	kube kubernetes.Interface
	pods map[string][]corev1.Pod
}

func (r *resolver) list(ctx context.Context, ns string) ([]corev1.Pod, error) {
	if pods, ok := r.pods[ns]; ok {
		return pods, nil
	}
	l, err := r.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing pods in %s to find the workloads of client identities: %w", ns, err)
	}
	r.pods[ns] = l.Items
	return l.Items, nil
}

// source is the workload whose pods run as clientID's service account;
// with none or several, the service account itself. A client of another
// trust domain than serverID's (a linked cluster's) is not looked for
// here: a pod of this cluster running as an account of that name is
// another workload.
func (r *resolver) source(ctx context.Context, clientID, serverID string) (Workload, error) {
	if clientID == "" {
		return Workload{Name: Unmeshed}, nil
	}
	id, err := spiffe.Parse(clientID)
	if err != nil {
		// "overflow" (the proxy's bound on distinct identities) or foreign.
		return Workload{Name: clientID}, nil
	}
	if server, err := spiffe.Parse(serverID); err == nil && server.TrustDomain != id.TrustDomain {
		return Workload{Cluster: id.TrustDomain, Namespace: id.Namespace, Kind: KindServiceAccount, Name: id.ServiceAccount}, nil
	}
	pods, err := r.list(ctx, id.Namespace)
	if err != nil {
		return Workload{}, err
	}
	var found []Workload
	for i := range pods {
		p := &pods[i]
		if saOf(p) != id.ServiceAccount {
			continue
		}
		kind, name := meshpod.Workload(p)
		w := Workload{Namespace: id.Namespace, Kind: kind, Name: name}
		if !slices.Contains(found, w) {
			found = append(found, w)
		}
	}
	if len(found) == 1 {
		return found[0], nil
	}
	return Workload{Namespace: id.Namespace, Kind: KindServiceAccount, Name: id.ServiceAccount}, nil
}

// serverID is the identity of dst's pods (their service account in the
// client's trust domain), when they all share one.
func (r *resolver) serverID(ctx context.Context, dst Workload, clientID string) (string, error) {
	client, err := spiffe.Parse(clientID)
	if err != nil {
		return "", nil
	}
	pods, err := r.list(ctx, dst.Namespace)
	if err != nil {
		return "", err
	}
	sa := ""
	for i := range pods {
		p := &pods[i]
		if kind, name := meshpod.Workload(p); kind != dst.Kind || name != dst.Name {
			continue
		}
		if sa != "" && saOf(p) != sa {
			return "", nil
		}
		sa = saOf(p)
	}
	if sa == "" {
		return "", nil
	}
	return spiffe.New(client.TrustDomain, dst.Namespace, sa).String(), nil
}

func saOf(p *corev1.Pod) string {
	if p.Spec.ServiceAccountName == "" {
		return "default"
	}
	return p.Spec.ServiceAccountName
}
