package diagnostics

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// What plexusctl install deploys, by which Endpoints finds destination
// and its identity.
const (
	// DestinationSelector selects destination's pods.
	DestinationSelector = "app.kubernetes.io/name=plexus-destination"
	// DestinationServiceAccount is destination's service account: its
	// identity is spiffe://TRUST_DOMAIN/ns/CONTROL_NAMESPACE/sa/plexus-destination.
	DestinationServiceAccount = "plexus-destination"
	// DestinationPort is destination's gRPC port when its pod names no
	// container port grpc.
	DestinationPort = 8086
	// TrustAnchorsConfigMap and TrustAnchorsKey hold the mesh's trust
	// anchors (PEM) in the control plane namespace.
	TrustAnchorsConfigMap = "plexus-identity-trust-anchors"
	TrustAnchorsKey       = "ca-bundle.crt"
)

// Authority is a service port as a proxy asks destination for it.
type Authority struct {
	Service, Namespace string
	Port               uint16
}

// String is the authority as destination's path: SVC.NS.svc.DOMAIN:PORT.
func (a Authority) String(clusterDomain string) string {
	return fmt.Sprintf("%s.%s.svc.%s:%d", a.Service, a.Namespace, clusterDomain, a.Port)
}

// ParseAuthority reads SVC.NS:PORT or SVC.NS.svc.CLUSTER_DOMAIN:PORT (a
// trailing dot and case do not matter, as for destination).
func ParseAuthority(s, clusterDomain string) (Authority, error) {
	host, portText, err := net.SplitHostPort(s)
	if err != nil {
		return Authority{}, fmt.Errorf("%q: want SVC.NS:PORT", s)
	}
	port, err := strconv.ParseUint(portText, 10, 16)
	if err != nil || port == 0 {
		return Authority{}, fmt.Errorf("%q: port %q is not a number in 1-65535", s, portText)
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	name = strings.TrimSuffix(name, ".svc."+strings.ToLower(clusterDomain))
	svc, ns, ok := strings.Cut(name, ".")
	if !ok || strings.Contains(ns, ".") || len(validation.IsDNS1035Label(svc)) > 0 || len(validation.IsDNS1123Label(ns)) > 0 {
		return Authority{}, fmt.Errorf("%q: want SVC.NS:PORT or SVC.NS.svc.%s:PORT", s, clusterDomain)
	}
	return Authority{Service: svc, Namespace: ns, Port: uint16(port)}, nil
}

// Endpoint is one address destination sends a proxy.
type Endpoint struct {
	Address string `json:"address"` // IP:port, the pod's port
	// Identity is the SPIFFE ID the proxy requires of the endpoint; empty:
	// none, the proxy connects in plaintext (a pod without a proxy).
	Identity string `json:"identity,omitempty"`
	Weight   uint32 `json:"weight"`
	// ProtocolHint is opaque (the pod lists the port in its opaque-ports:
	// the proxy forwards bytes) or h2; empty: none.
	ProtocolHint string `json:"protocolHint,omitempty"`
	// Terminating: the pod is draining; the proxy sends it nothing new
	// while another endpoint is not terminating.
	Terminating bool `json:"terminating"`
	// Labels are the metric labels of the set and of the address (pod,
	// owner_kind, owner_name, serviceaccount, zone, namespace, service).
	Labels map[string]string `json:"labels,omitempty"`
}

// EndpointsReport is what Endpoints.Run returns: destination's first
// answer to a proxy's Get.
type EndpointsReport struct {
	Authority string `json:"authority"` // SVC.NS.svc.DOMAIN:PORT
	// Destination is the pod asked (namespace/name), which proved
	// DestinationIdentity.
	Destination         string `json:"destination"`
	DestinationIdentity string `json:"destinationIdentity"`
	TrustDomain         string `json:"trustDomain"`
	// Exists: destination knows the service. False: it does not exist
	// (in destination's cache), or is of type ExternalName (which proxies
	// resolve by DNS); there are no endpoints.
	Exists    bool       `json:"exists"`
	Endpoints []Endpoint `json:"endpoints"`
	// Comparison, with --compare: the same computed from the API.
	Comparison *Comparison `json:"comparison,omitempty"`
}

// Comparison sets what the EndpointSlices say, by destination's rules
// (SliceEndpoints), beside what destination said.
type Comparison struct {
	Slices *SliceReport `json:"slices,omitempty"`
	// Error is why the slices could not be read (the service does not
	// exist, say).
	Error string `json:"error,omitempty"`
	// OnlyDestination are addresses destination sent that the slices do
	// not publish; OnlySlices the reverse. Both empty: they agree.
	OnlyDestination []string `json:"onlyDestination,omitempty"`
	OnlySlices      []string `json:"onlySlices,omitempty"`
}

// Endpoints asks destination what it tells a proxy about a service port,
// as a proxy does (Get, its first answer), from a ready destination pod
// through Dial (a port-forward: the connection arrives on the pod's
// loopback, which destination answers without a client certificate). The
// connection is TLS, destination proving its identity
// (spiffe://TRUST_DOMAIN/ns/CONTROL_NAMESPACE/sa/plexus-destination)
// against the trust anchors of the ConfigMap plexus-identity-trust-anchors.
type Endpoints struct {
	Client kubernetes.Interface
	// Dial connects to port of pod ns/name (portforward.PodDialer.DialConn).
	Dial             func(ctx context.Context, ns, pod string, port uint16) (net.Conn, error)
	ControlNamespace string
	TrustDomain      string
	ClusterDomain    string
	// Compare also computes the endpoints from the EndpointSlices
	// (SliceEndpoints) and sets them beside destination's.
	Compare bool
}

// Run asks destination for a.
func (e Endpoints) Run(ctx context.Context, a Authority) (*EndpointsReport, error) {
	pod, port, err := e.destinationPod(ctx)
	if err != nil {
		return nil, err
	}
	roots, err := e.trustAnchors(ctx)
	if err != nil {
		return nil, err
	}
	want := spiffe.New(e.TrustDomain, e.ControlNamespace, DestinationServiceAccount)
	r := &EndpointsReport{
		Authority:           a.String(e.ClusterDomain),
		Destination:         pod.Namespace + "/" + pod.Name,
		DestinationIdentity: want.String(),
		TrustDomain:         e.TrustDomain,
		Endpoints:           []Endpoint{},
	}
	conn, err := grpc.NewClient("passthrough:///"+DestinationServiceAccount,
		grpc.WithTransportCredentials(credentials.NewTLS(serverTLS(roots, want))),
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) {
			return e.Dial(ctx, pod.Namespace, pod.Name, port)
		}))
	if err != nil {
		return nil, fmt.Errorf("destination client: %w", err)
	}
	defer conn.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream
	what := fmt.Sprintf("asking destination (pod %s, port %d, through a port-forward) for %s", r.Destination, port, r.Authority)
	st, err := pb.NewDestinationClient(conn).Get(ctx, &pb.GetDestination{Path: r.Authority})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	u, err := st.Recv()
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	switch u := u.GetUpdate().(type) {
	case *pb.Update_Add:
		r.Exists = true
		for _, wa := range u.Add.GetAddrs() {
			r.Endpoints = append(r.Endpoints, endpointOf(u.Add.GetMetricLabels(), wa))
		}
	case *pb.Update_NoEndpoints:
		r.Exists = u.NoEndpoints.GetExists()
	default:
		return nil, fmt.Errorf("%s: the first answer is %T, want an Add or NoEndpoints", what, u)
	}
	slices.SortFunc(r.Endpoints, func(x, y Endpoint) int {
		return cmp.Or(b2i(x.Terminating)-b2i(y.Terminating), compareAddr(x.Address, y.Address))
	})
	if e.Compare {
		r.Comparison = e.compare(ctx, a, r)
	}
	return r, nil
}

// endpointOf is one address of an Add.
func endpointOf(setLabels map[string]string, wa *pb.WeightedAddr) Endpoint {
	ep := Endpoint{Weight: wa.GetWeight(), Terminating: wa.GetTerminating(), Identity: wa.GetTlsIdentity().GetSpiffeId()}
	if ip, ok := netip.AddrFromSlice(wa.GetAddr().GetIp()); ok {
		ep.Address = netip.AddrPortFrom(ip.Unmap(), uint16(wa.GetAddr().GetPort())).String()
	} else {
		ep.Address = fmt.Sprintf("%x:%d", wa.GetAddr().GetIp(), wa.GetAddr().GetPort())
	}
	switch wa.GetProtocolHint().GetProtocol() {
	case pb.ProtocolHint_OPAQUE:
		ep.ProtocolHint = "opaque"
	case pb.ProtocolHint_H2:
		ep.ProtocolHint = "h2"
	}
	if len(setLabels)+len(wa.GetMetricLabels()) > 0 {
		ep.Labels = maps.Clone(setLabels)
		if ep.Labels == nil {
			ep.Labels = map[string]string{}
		}
		maps.Copy(ep.Labels, wa.GetMetricLabels())
	}
	return ep
}

// destinationPod is a ready destination pod (by name, the first) and
// its gRPC port.
func (e Endpoints) destinationPod(ctx context.Context) (*corev1.Pod, uint16, error) {
	list, err := e.Client.CoreV1().Pods(e.ControlNamespace).List(ctx, metav1.ListOptions{LabelSelector: DestinationSelector})
	if err != nil {
		return nil, 0, fmt.Errorf("listing destination's pods in %s: %w", e.ControlNamespace, err)
	}
	var ready []*corev1.Pod
	for i := range list.Items {
		if p := &list.Items[i]; p.DeletionTimestamp == nil && p.Status.Phase == corev1.PodRunning && podReady(p) {
			ready = append(ready, p)
		}
	}
	if len(ready) == 0 {
		return nil, 0, fmt.Errorf("no ready destination pod in %s (%d pods match %s)", e.ControlNamespace, len(list.Items), DestinationSelector)
	}
	slices.SortFunc(ready, func(a, b *corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	pod := ready[0]
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == "grpc" && p.ContainerPort > 0 && p.ContainerPort < 65536 {
				return pod, uint16(p.ContainerPort), nil
			}
		}
	}
	return pod, DestinationPort, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// trustAnchors reads the mesh's trust anchors.
func (e Endpoints) trustAnchors(ctx context.Context) (*x509.CertPool, error) {
	what := fmt.Sprintf("the trust anchors (ConfigMap %s/%s, key %s)", e.ControlNamespace, TrustAnchorsConfigMap, TrustAnchorsKey)
	cm, err := e.Client.CoreV1().ConfigMaps(e.ControlNamespace).Get(ctx, TrustAnchorsConfigMap, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, fmt.Errorf("%s: not found", what)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM([]byte(cm.Data[TrustAnchorsKey])) {
		return nil, fmt.Errorf("%s: no PEM certificate", what)
	}
	return roots, nil
}

// serverTLS is the client side of a connection to destination: TLS 1.3,
// the server's chain verified to roots and its leaf naming want; no
// client certificate.
func serverTLS(roots *x509.CertPool, want spiffe.ID) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ServerName: want.ServiceAccount + "." + want.Namespace,
		// The SAN is a URI, not a host name: the standard verification is
		// replaced by VerifyConnection, never skipped.
		InsecureSkipVerify: true,
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("destination presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, c := range cs.PeerCertificates[1:] {
				inter.AddCert(c)
			}
			chains, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
			if err != nil {
				return fmt.Errorf("destination's certificate is not of the mesh's trust anchors: %w", err)
			}
			_, err = spiffe.VerifyPeer(chains, want)
			return err
		},
	}
}

// compare computes a from the EndpointSlices and names the published
// addresses destination and the slices disagree on.
func (e Endpoints) compare(ctx context.Context, a Authority, r *EndpointsReport) *Comparison {
	s, err := SliceEndpoints{Client: e.Client, TrustDomain: e.TrustDomain, ClusterDomain: e.ClusterDomain}.Run(ctx, a)
	if err != nil {
		return &Comparison{Error: err.Error()}
	}
	c := &Comparison{Slices: s}
	fromDestination, fromSlices := map[string]bool{}, map[string]bool{}
	for _, ep := range r.Endpoints {
		fromDestination[ep.Address] = true
	}
	for _, ep := range s.Endpoints {
		if ep.Published {
			fromSlices[ep.Address] = true
		}
	}
	for addr := range fromDestination {
		if !fromSlices[addr] {
			c.OnlyDestination = append(c.OnlyDestination, addr)
		}
	}
	for addr := range fromSlices {
		if !fromDestination[addr] {
			c.OnlySlices = append(c.OnlySlices, addr)
		}
	}
	slices.SortFunc(c.OnlyDestination, compareAddr)
	slices.SortFunc(c.OnlySlices, compareAddr)
	return c
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
