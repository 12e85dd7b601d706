// Package authzreport shows the inbound policy of each port of a workload as
// destination computes it — Server or default policy, protocol,
// authorizations, routes, rate limit — and, for a client identity, what
// that client would get, decided by the proxy's own code.
package authzreport

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/control/cli/kinds"
	"github.com/plexus-mesh/plexus/control/inboundpolicy"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

// Kind is a kind of workload.
type Kind string

// Kinds.
const (
	Deployment  Kind = "deployment"
	StatefulSet Kind = "statefulset"
	DaemonSet   Kind = "daemonset"
	Pod         Kind = "pod"
)

// workloads are the kinds authz takes.
var workloads = []kinds.Kind{kinds.Deployments, kinds.StatefulSets, kinds.DaemonSets, kinds.Pods}

// ParseKind accepts kubectl's names and short names.
func ParseKind(s string) (Kind, error) {
	k, err := kinds.Parse(s, workloads...)
	return Kind(k.Singular()), err
}

// ParseTarget reads one workload from kubectl-style arguments: KIND/NAME
// or KIND NAME.
func ParseTarget(args []string) (Kind, string, error) {
	k, name, err := kinds.ParseTarget(args, workloads...)
	return Kind(k.Singular()), name, err
}

// From is the client of --from: a service account (whose identity
// is in destination's trust domain), or an identity.
type From struct {
	Namespace, ServiceAccount string
	// ID, without a service account: the identity, "" for a plaintext
	// client.
	ID string
}

// ParseFrom reads --from: sa/NAME or serviceaccount/NAME (in namespace
// ns), a SPIFFE ID, or "unauthenticated" (a plaintext client).
func ParseFrom(s, ns string) (*From, error) {
	switch {
	case s == "unauthenticated":
		return &From{}, nil
	case strings.HasPrefix(s, "spiffe://"):
		id, err := spiffe.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("--from %q: %w", s, err)
		}
		return &From{ID: id.String()}, nil
	}
	kind, name, ok := strings.Cut(s, "/")
	if !ok || (kind != "sa" && kind != "serviceaccount") || name == "" || strings.Contains(name, "/") || ns == "" {
		return nil, fmt.Errorf("--from %q: want sa/NAME, a spiffe:// ID or unauthenticated", s)
	}
	return &From{Namespace: ns, ServiceAccount: name}, nil
}

// identity is f's identity in trustDomain, and f in words.
func (f From) identity(trustDomain string) (id, name string) {
	switch {
	case f.ServiceAccount != "":
		return spiffe.New(trustDomain, f.Namespace, f.ServiceAccount).String(), "sa " + f.Namespace + "/" + f.ServiceAccount
	case f.ID != "":
		return f.ID, f.ID
	}
	return "", "unauthenticated"
}

// Config says what to show.
type Config struct {
	Kind      Kind
	Name      string
	Namespace string
	// Port, when not 0, is the only port shown (declared or not).
	Port uint16
	// From, when set, is evaluated on every port; FromAddr is its
	// address (invalid: unknown, networks are conditions).
	From     *From
	FromAddr netip.Addr
	// ControlPlaneNamespace holds destination's Deployment.
	ControlPlaneNamespace string
}

// Validate reports what cannot be shown.
func (c Config) Validate() error {
	var errs []error
	if _, err := ParseKind(string(c.Kind)); err != nil {
		errs = append(errs, err)
	}
	if c.Name == "" || c.Namespace == "" || c.ControlPlaneNamespace == "" {
		errs = append(errs, errors.New("want a workload name, its namespace and the control plane's"))
	}
	if c.FromAddr.IsValid() && c.From == nil {
		errs = append(errs, errors.New("--from-ip needs --from"))
	}
	return errors.Join(errs...)
}

// Authz computes reports. Its fields are what tests replace.
type Authz struct {
	Clients inboundpolicy.Clients
}

// Run computes the report of cfg.
func (a Authz) Run(ctx context.Context, cfg Config) (*Report, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	pod, template, err := a.pod(ctx, cfg)
	if err != nil {
		return nil, err
	}
	settings, err := a.Clients.Settings(ctx, cfg.ControlPlaneNamespace)
	if err != nil {
		return nil, err
	}
	dcfg, err := settings.Config()
	if err != nil {
		return nil, err
	}
	snap, err := a.Clients.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	r := &Report{Kind: cfg.Kind, Name: cfg.Name, Namespace: cfg.Namespace, Settings: settings, Ports: []Port{}}
	switch {
	case template:
		r.PodTemplate = true
		r.Notes = append(r.Notes, fmt.Sprintf("%s/%s has no pod: computed for its pod template (a pod's annotations and labels may differ once admitted)", cfg.Kind, cfg.Name))
	default:
		r.Pod = pod.Name
		if !meshpod.IsMeshed(pod) {
			r.Notes = append(r.Notes, fmt.Sprintf("pod %s has no %s container: nothing enforces this policy", pod.Name, meshpod.ProxyContainerName))
		}
	}
	var client *inboundpolicy.Client
	if cfg.From != nil {
		id, name := cfg.From.identity(dcfg.TrustDomain)
		client = &inboundpolicy.Client{ID: id, Addr: cfg.FromAddr}
		r.Client = &ClientInfo{Name: name, Identity: id}
		if cfg.FromAddr.IsValid() {
			r.Client.Address = cfg.FromAddr.String()
		}
	}
	ports := declaredPorts(pod)
	if cfg.Port != 0 {
		ports = []portName{{cfg.Port, portNameOf(pod, cfg.Port)}}
	}
	if len(ports) == 0 {
		r.Notes = append(r.Notes, "its containers declare no TCP port: name one with --port")
	}
	for _, pn := range ports {
		pol, warnings, err := snap.Policy(dcfg, pod, pn.port)
		if err != nil {
			return nil, err
		}
		port := newPort(pn, pol)
		if client != nil {
			acc, err := access(pol, *client)
			if err != nil {
				warnings = append(warnings, err.Error())
			}
			port.Access = acc
		}
		r.Ports = append(r.Ports, port)
		for _, w := range warnings {
			if !slices.Contains(r.Notes, w) {
				r.Notes = append(r.Notes, w)
			}
		}
	}
	r.Notes = append(r.Notes, snap.Notes...)
	return r, nil
}

// pod returns the pod to compute for: of the workload's pods that have
// not finished, one not being deleted, running, newest (then by name);
// with none, a pod made of the workload's template (template true).
func (a Authz) pod(ctx context.Context, cfg Config) (*corev1.Pod, bool, error) {
	kube := a.Clients.Kube
	what := fmt.Sprintf("%s %s/%s", cfg.Kind, cfg.Namespace, cfg.Name)
	if cfg.Kind == Pod {
		p, err := kube.CoreV1().Pods(cfg.Namespace).Get(ctx, cfg.Name, metav1.GetOptions{})
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", what, err)
		}
		return p, false, nil
	}
	var sel *metav1.LabelSelector
	var tmpl corev1.PodTemplateSpec
	switch cfg.Kind {
	case Deployment:
		d, err := kube.AppsV1().Deployments(cfg.Namespace).Get(ctx, cfg.Name, metav1.GetOptions{})
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", what, err)
		}
		sel, tmpl = d.Spec.Selector, d.Spec.Template
	case StatefulSet:
		s, err := kube.AppsV1().StatefulSets(cfg.Namespace).Get(ctx, cfg.Name, metav1.GetOptions{})
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", what, err)
		}
		sel, tmpl = s.Spec.Selector, s.Spec.Template
	case DaemonSet:
		d, err := kube.AppsV1().DaemonSets(cfg.Namespace).Get(ctx, cfg.Name, metav1.GetOptions{})
		if err != nil {
			return nil, false, fmt.Errorf("%s: %w", what, err)
		}
		sel, tmpl = d.Spec.Selector, d.Spec.Template
	}
	s, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil || s.Empty() {
		return nil, false, fmt.Errorf("%s: unusable selector %v", what, sel)
	}
	list, err := kube.CoreV1().Pods(cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: s.String()})
	if err != nil {
		return nil, false, fmt.Errorf("listing the pods of %s: %w", what, err)
	}
	var pods []*corev1.Pod
	for i := range list.Items {
		p := &list.Items[i]
		if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			pods = append(pods, p)
		}
	}
	if len(pods) == 0 {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.Namespace, Name: cfg.Name, Labels: tmpl.Labels, Annotations: tmpl.Annotations}, Spec: tmpl.Spec}, true, nil
	}
	b2i := func(b bool) int {
		if b {
			return 1
		}
		return 0
	}
	slices.SortFunc(pods, func(x, y *corev1.Pod) int {
		return cmp.Or(
			b2i(x.DeletionTimestamp != nil)-b2i(y.DeletionTimestamp != nil),
			b2i(y.Status.Phase == corev1.PodRunning)-b2i(x.Status.Phase == corev1.PodRunning),
			y.CreationTimestamp.Compare(x.CreationTimestamp.Time),
			strings.Compare(x.Name, y.Name))
	})
	return pods[0], false, nil
}

type portName struct {
	port uint16
	name string
}

// declaredPorts are the TCP ports the pod's containers declare, but the
// proxy's, in order: the ports whose policies its proxy asks for
// (control/inject's PLEXUS_PROXY_INBOUND_PORTS).
func declaredPorts(pod *corev1.Pod) []portName {
	var out []portName
	for _, cs := range [][]corev1.Container{pod.Spec.InitContainers, pod.Spec.Containers} {
		for _, c := range cs {
			if c.Name == meshpod.ProxyContainerName {
				continue
			}
			for _, p := range c.Ports {
				if (p.Protocol == "" || p.Protocol == corev1.ProtocolTCP) && p.ContainerPort > 0 && p.ContainerPort < 65536 &&
					!slices.ContainsFunc(out, func(pn portName) bool { return pn.port == uint16(p.ContainerPort) }) {
					out = append(out, portName{uint16(p.ContainerPort), p.Name})
				}
			}
		}
	}
	slices.SortFunc(out, func(a, b portName) int { return cmp.Compare(a.port, b.port) })
	return out
}

func portNameOf(pod *corev1.Pod, port uint16) string {
	for _, pn := range declaredPorts(pod) {
		if pn.port == port {
			return pn.name
		}
	}
	return ""
}

func newPort(pn portName, p *pb.InboundPolicy) Port {
	out := Port{Port: pn.port, Name: pn.name, Server: inboundpolicy.RefOf(p.GetServer()), Protocol: p.GetProtocol(), Audit: p.GetAudit(),
		Authorizations: authorizations(p.GetAuthorizations())}
	for _, r := range p.GetRoutes() {
		rt := Route{Ref: inboundpolicy.RefOf(r.GetRef()), Authorizations: authorizations(r.GetAuthorizations())}
		for _, m := range r.GetMatches() {
			rt.Matches = append(rt.Matches, matchText(m))
		}
		out.Routes = append(out.Routes, rt)
	}
	if rl := p.GetRateLimit(); rl != nil {
		out.RateLimit = &RateLimit{Ref: inboundpolicy.RefOf(rl.GetRef()), TotalPerSecond: rl.GetTotalPerSecond(), IdentityPerSecond: rl.GetIdentityPerSecond()}
		for _, o := range rl.GetOverrides() {
			out.RateLimit.Overrides = append(out.RateLimit.Overrides, Override{RequestsPerSecond: o.GetRequestsPerSecond(), Identities: o.GetIdentities()})
		}
	}
	return out
}

func authorizations(as []*pb.Authorization) []Authorization {
	out := []Authorization{}
	for _, a := range as {
		x := Authorization{Ref: inboundpolicy.RefOf(a.GetRef()), Networks: inboundpolicy.NetworksOf(a.GetNetworks()), MeshTLS: a.GetMeshTls(), DryRun: a.GetDryRun()}
		x.Identities = append(x.Identities, a.GetIdentities()...)
		for _, p := range a.GetPrefixes() {
			x.Identities = append(x.Identities, p+"*")
		}
		out = append(out, x)
	}
	return out
}

// matchText writes a route match: method, path (exact as it is, prefix
// or regex so named), headers and query parameters (= exact, ~ regex).
func matchText(m *pb.RouteMatch) string {
	var parts []string
	if m.GetMethod() != "" {
		parts = append(parts, m.GetMethod())
	}
	if p := m.GetPath(); p != nil {
		parts = append(parts, map[pb.PathMatch_Kind]string{pb.PathMatch_EXACT: "", pb.PathMatch_PREFIX: "prefix ", pb.PathMatch_REGEX: "regex "}[p.GetKind()]+p.GetValue())
	}
	for _, h := range m.GetHeaders() {
		parts = append(parts, fmt.Sprintf("header %s%s%s", h.GetName(), map[pb.HeaderMatch_Kind]string{pb.HeaderMatch_EXACT: "=", pb.HeaderMatch_REGEX: "~"}[h.GetKind()], h.GetValue()))
	}
	for _, q := range m.GetQuery() {
		parts = append(parts, fmt.Sprintf("query %s%s%s", q.GetName(), map[pb.QueryMatch_Kind]string{pb.QueryMatch_EXACT: "=", pb.QueryMatch_REGEX: "~"}[q.GetKind()], q.GetValue()))
	}
	if m.GetCondition() != nil {
		parts = append(parts, "condition")
	}
	if len(parts) == 0 {
		return "*"
	}
	return strings.Join(parts, " ")
}

// access evaluates client on the port: a connection, and a request on
// each route.
func access(p *pb.InboundPolicy, c inboundpolicy.Client) (*Access, error) {
	var errs []error
	conn, err := inboundpolicy.Connection(p, c)
	errs = append(errs, err)
	a := &Access{Connection: conn, RateLimit: inboundpolicy.RateLimit(p, c.ID)}
	for i, r := range p.GetRoutes() {
		vs, err := inboundpolicy.Route(p, i, c)
		errs = append(errs, err)
		a.Routes = append(a.Routes, RouteAccess{Route: inboundpolicy.RefOf(r.GetRef()), Verdicts: vs})
	}
	return a, errors.Join(errs...)
}
