package destination

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
)

// policyResources are the policy.plexus.dev resources by kind.
var policyResources = map[schema.GroupVersionResource]string{
	policyv1alpha1.ServerResource:                   policyv1alpha1.ServerKind,
	policyv1alpha1.AuthorizationPolicyResource:      policyv1alpha1.AuthorizationPolicyKind,
	policyv1alpha1.MeshTLSAuthenticationResource:    policyv1alpha1.MeshTLSAuthenticationKind,
	policyv1alpha1.NetworkAuthenticationResource:    policyv1alpha1.NetworkAuthenticationKind,
	policyv1alpha1.HTTPLocalRateLimitPolicyResource: policyv1alpha1.HTTPLocalRateLimitPolicyKind,
}

func policyDiscovery() *metav1.APIResourceList {
	l := &metav1.APIResourceList{GroupVersion: policyv1alpha1.APIVersion}
	for gvr, kind := range policyResources {
		l.APIResources = append(l.APIResources, metav1.APIResource{Name: gvr.Resource, Namespaced: true, Kind: kind})
	}
	return l
}

// policyObject converts a policy.plexus.dev object to what the dynamic
// client stores; ok is false for any other object.
func policyObject(t testing.TB, obj any) (u *unstructured.Unstructured, ok bool) {
	t.Helper()
	var kind string
	switch obj.(type) {
	case *policyv1alpha1.Server:
		kind = policyv1alpha1.ServerKind
	case *policyv1alpha1.AuthorizationPolicy:
		kind = policyv1alpha1.AuthorizationPolicyKind
	case *policyv1alpha1.MeshTLSAuthentication:
		kind = policyv1alpha1.MeshTLSAuthenticationKind
	case *policyv1alpha1.NetworkAuthentication:
		kind = policyv1alpha1.NetworkAuthenticationKind
	case *policyv1alpha1.HTTPLocalRateLimitPolicy:
		kind = policyv1alpha1.HTTPLocalRateLimitPolicyKind
	default:
		return nil, false
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u = &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(policyv1alpha1.APIVersion)
	u.SetKind(kind)
	return u, true
}

// meta is the metadata of a test object created age ago (seconds).
func meta(ns, name string, age int) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1_800_000_000-int64(age), 0))}
}

// inboundPod is pod ns/web (service account web, label app=web, host IP
// 192.168.1.10): container app with port http 8080, readiness GET
// /ready?full=1 on port http, liveness GET /live on 8080, and a
// startup tcp probe; port 9090 has no probe.
func inboundPod(annotations map[string]string) *corev1.Pod {
	p := pod("ns", "web", "10.1.0.1", true, annotations)
	p.Labels = map[string]string{"app": "web"}
	p.Status.HostIP = "192.168.1.10"
	p.Status.HostIPs = []corev1.HostIP{{IP: "192.168.1.10"}}
	c := &p.Spec.Containers[0]
	c.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}}
	c.ReadinessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready?full=1", Port: intstr.FromString("http")}}}
	c.LivenessProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/live", Port: intstr.FromInt32(8080)}}}
	c.StartupProbe = &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(8080)}}}
	return p
}

func namespaceObj(name string, annotations map[string]string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations}}
}

// server is a Server in ns selecting app=<app> on port (an int or a
// name) with accessPolicy access ("" unset).
func server(name, app string, port intstr.IntOrString, access policyv1alpha1.AccessPolicy, age int) *policyv1alpha1.Server {
	return &policyv1alpha1.Server{ObjectMeta: meta("ns", name, age), Spec: policyv1alpha1.ServerSpec{
		PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": app}}, Port: port, AccessPolicy: access,
	}}
}

// authzPolicy is an AuthorizationPolicy in ns targeting "Kind/name"
// (Server, HTTPRoute, GRPCRoute, Namespace) requiring refs
// ("Kind/name" or "Kind/ns/name").
func authzPolicy(name, target string, refs ...string) *policyv1alpha1.AuthorizationPolicy {
	kind, tname, _ := strings.Cut(target, "/")
	groups := map[string]string{"Server": policyv1alpha1.Group, "HTTPRoute": policyv1alpha1.GatewayGroup, "GRPCRoute": policyv1alpha1.GatewayGroup,
		"MeshTLSAuthentication": policyv1alpha1.Group, "NetworkAuthentication": policyv1alpha1.Group}
	ap := &policyv1alpha1.AuthorizationPolicy{ObjectMeta: meta("ns", name, 0), Spec: policyv1alpha1.AuthorizationPolicySpec{
		TargetRef: policyv1alpha1.TargetRef{Group: groups[kind], Kind: kind, Name: tname}, RequiredAuthenticationRefs: []policyv1alpha1.NamespacedTargetRef{},
	}}
	for _, r := range refs {
		parts := strings.Split(r, "/")
		ref := policyv1alpha1.NamespacedTargetRef{Group: groups[parts[0]], Kind: parts[0], Name: parts[len(parts)-1]}
		if len(parts) == 3 {
			ref.Namespace = parts[1]
		}
		ap.Spec.RequiredAuthenticationRefs = append(ap.Spec.RequiredAuthenticationRefs, ref)
	}
	return ap
}

func meshTLS(name string, identities []string, refs ...policyv1alpha1.IdentityRef) *policyv1alpha1.MeshTLSAuthentication {
	return &policyv1alpha1.MeshTLSAuthentication{ObjectMeta: meta("ns", name, 0), Spec: policyv1alpha1.MeshTLSAuthenticationSpec{Identities: identities, IdentityRefs: refs}}
}

func networkAuthn(name string, networks ...policyv1alpha1.Network) *policyv1alpha1.NetworkAuthentication {
	return &policyv1alpha1.NetworkAuthentication{ObjectMeta: meta("ns", name, 0), Spec: policyv1alpha1.NetworkAuthenticationSpec{Networks: networks}}
}

// routeToServer is an HTTPRoute in ns whose parent is Server srv, one
// rule matching method and the exact path.
func routeToServer(name, srv, method, path string) *gatewayv1.HTTPRoute {
	m := gatewayv1.HTTPRouteMatch{Path: &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchExact), Value: &path}, Method: ptr(gatewayv1.HTTPMethod(method))}
	return &gatewayv1.HTTPRoute{ObjectMeta: meta("ns", name, 0), Spec: gatewayv1.HTTPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{
			Group: ptr(gatewayv1.Group(policyv1alpha1.Group)), Kind: ptr(gatewayv1.Kind(policyv1alpha1.ServerKind)), Name: gatewayv1.ObjectName(srv)}}},
		Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{m}}},
	}}
}

// inboundStreamOf opens GetInboundPolicy for ns/pod:port.
func (c *routeCluster) inboundStreamOf(t testing.TB, ns, podName string, port uint32) (grpc.ServerStreamingClient[pb.InboundPolicy], context.CancelFunc) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	st, err := c.dst.GetInboundPolicy(ctx, &pb.InboundPolicyRequest{Namespace: ns, Pod: podName, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	return st, cancel
}

// watchInbound reads GetInboundPolicy of ns/pod:port in the background.
func (c *routeCluster) watchInbound(t testing.TB, ns, podName string, port uint32) *recvStream[*pb.InboundPolicy] {
	t.Helper()
	st, _ := c.inboundStreamOf(t, ns, podName, port)
	r := &recvStream[*pb.InboundPolicy]{msgs: make(chan *pb.InboundPolicy, 100), err: make(chan error, 1)}
	go func() {
		for {
			m, err := st.Recv()
			if err != nil {
				r.err <- err
				return
			}
			r.msgs <- m
		}
	}()
	return r
}

// inboundSummary describes an inbound policy in one line:
//
//	<server> <protocol>[ audit] authz[<a> ...] routes[<ref> (<matches>) authz[...] | ...] rl[...]
//
// an authorization as <ref>{nets=<cidr>-<except>,...;mtls;ids=...;prefixes=...;dry}.
func inboundSummary(p *pb.InboundPolicy) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s", refText(p.GetServer()), p.GetProtocol())
	if p.GetAudit() {
		b.WriteString(" audit")
	}
	b.WriteString(" authz" + authzText(p.GetAuthorizations()))
	if len(p.GetRoutes()) > 0 {
		var rs []string
		for _, r := range p.GetRoutes() {
			var ms []string
			for _, m := range r.GetMatches() {
				ms = append(ms, strings.TrimSpace(fmt.Sprintf("%s %s%s", m.GetMethod(), map[pb.PathMatch_Kind]string{pb.PathMatch_EXACT: "=", pb.PathMatch_PREFIX: "^", pb.PathMatch_REGEX: "~"}[m.GetPath().GetKind()], m.GetPath().GetValue())))
			}
			rs = append(rs, fmt.Sprintf("%s (%s) authz%s", refText(r.GetRef()), strings.Join(ms, ", "), authzText(r.GetAuthorizations())))
		}
		b.WriteString(" routes[" + strings.Join(rs, " | ") + "]")
	}
	if rl := p.GetRateLimit(); rl != nil {
		fmt.Fprintf(&b, " rl[%s total=%d identity=%d", refText(rl.GetRef()), rl.GetTotalPerSecond(), rl.GetIdentityPerSecond())
		for _, o := range rl.GetOverrides() {
			fmt.Fprintf(&b, " %d:%s", o.GetRequestsPerSecond(), strings.Join(o.GetIdentities(), ","))
		}
		b.WriteString("]")
	}
	return b.String()
}

// refText is Kind:ns/name (default:name), with the group when it is not
// the one the kind belongs to.
func refText(r *pb.ResourceRef) string {
	groups := map[string]string{"Server": policyv1alpha1.Group, "AuthorizationPolicy": policyv1alpha1.Group, "HTTPLocalRateLimitPolicy": policyv1alpha1.Group,
		"HTTPRoute": policyv1alpha1.GatewayGroup, "GRPCRoute": policyv1alpha1.GatewayGroup}
	s := r.GetKind() + ":" + r.GetName()
	if r.GetNamespace() != "" {
		s = r.GetKind() + ":" + r.GetNamespace() + "/" + r.GetName()
	}
	if r.GetGroup() != groups[r.GetKind()] {
		s += "(group " + r.GetGroup() + ")"
	}
	return s
}

func authzText(as []*pb.Authorization) string {
	var out []string
	for _, a := range as {
		var parts []string
		var nets []string
		for _, n := range a.GetNetworks() {
			nets = append(nets, strings.Join(append([]string{n.GetCidr()}, n.GetExcept()...), "-"))
		}
		if len(nets) > 0 {
			parts = append(parts, "nets="+strings.Join(nets, ","))
		}
		if a.GetMeshTls() {
			parts = append(parts, "mtls")
		}
		if len(a.GetIdentities()) > 0 {
			parts = append(parts, "ids="+strings.Join(a.GetIdentities(), ","))
		}
		if len(a.GetPrefixes()) > 0 {
			parts = append(parts, fmt.Sprintf("prefixes=%q", a.GetPrefixes()))
		}
		if a.GetDryRun() {
			parts = append(parts, "dry")
		}
		out = append(out, refText(a.GetRef())+"{"+strings.Join(parts, ";")+"}")
	}
	return "[" + strings.Join(out, " ") + "]"
}
