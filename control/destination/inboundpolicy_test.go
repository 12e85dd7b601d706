package destination

import (
	"cmp"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
)

const (
	idWeb   = "spiffe://cluster.local/ns/ns/sa/web"
	idA     = "spiffe://cluster.local/ns/ns/sa/a"
	idOther = "spiffe://cluster.local/ns/other/sa/b"
	// probes8080 is the probe route of inboundPod's port 8080.
	probes8080 = "default:probe (GET =/live, GET =/ready) authz[default:probe{}]"
	// catchAll8080 is the catch-all route beside it, then the probe route.
	catchAll8080 = " routes[default:default () authz[] | " + probes8080 + "]"
)

// TestInboundPolicy computes the inbound policy of a pod port in each
// case, through GetInboundPolicy's first message.
func TestInboundPolicy(t *testing.T) {
	annotated := func(v string) map[string]string { return map[string]string{AnnotationDefaultInboundPolicy: v} }
	srvWeb := server("web", "web", intstr.FromInt32(8080), policyv1alpha1.AllUnauthenticated, 10)
	srvDeny := server("web", "web", intstr.FromInt32(9090), "", 10)
	sa := func(name, ns string) policyv1alpha1.IdentityRef {
		return policyv1alpha1.IdentityRef{Kind: policyv1alpha1.ServiceAccountKind, Name: name, Namespace: ns}
	}
	nsRef := policyv1alpha1.IdentityRef{Kind: policyv1alpha1.NamespaceKind, Name: "other"}
	dryRun := authzPolicy("dry", "Server/web")
	dryRun.Annotations = map[string]string{AnnotationDryRun: "true"}
	limit := &policyv1alpha1.HTTPLocalRateLimitPolicy{ObjectMeta: meta("ns", "limit", 0), Spec: policyv1alpha1.HTTPLocalRateLimitPolicySpec{
		TargetRef: policyv1alpha1.TargetRef{Group: policyv1alpha1.Group, Kind: policyv1alpha1.ServerKind, Name: "web"},
		Total:     &policyv1alpha1.Limit{RequestsPerSecond: 100}, Identity: &policyv1alpha1.Limit{RequestsPerSecond: 20},
		Overrides: []policyv1alpha1.Override{{RequestsPerSecond: 50, ClientRefs: []policyv1alpha1.IdentityRef{sa("a", ""), sa("b", "other")}}},
	}}
	grpcRoute := &gatewayv1.GRPCRoute{ObjectMeta: meta("ns", "rpc", 5), Spec: gatewayv1.GRPCRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{
			Group: ptr(gatewayv1.Group(policyv1alpha1.Group)), Kind: ptr(gatewayv1.Kind("Server")), Name: "web"}}},
		Rules: []gatewayv1.GRPCRouteRule{{Matches: []gatewayv1.GRPCRouteMatch{{Method: &gatewayv1.GRPCMethodMatch{Service: ptr("shop.Cart")}}}}},
	}}
	for _, tc := range []struct {
		name    string
		noCRDs  bool
		cluster policyv1alpha1.AccessPolicy
		port    uint32 // default 9090 (no probe)
		objs    []any
		want    string
	}{
		{name: "cluster default", want: "default:all-unauthenticated unknown authz[default:all-unauthenticated{}]"},
		{name: "cluster deny", cluster: policyv1alpha1.Deny, want: "default:deny unknown authz[]"},
		{name: "cluster cluster-authenticated", cluster: policyv1alpha1.ClusterAuthenticated,
			want: "default:cluster-authenticated unknown authz[default:cluster-authenticated{nets=10.0.0.0/8,fd00::/8;mtls}]"},
		{name: "namespace annotation", objs: []any{namespaceObj("ns", annotated("all-authenticated"))},
			want: "default:all-authenticated unknown authz[default:all-authenticated{mtls}]"},
		{name: "pod annotation wins", objs: []any{namespaceObj("ns", annotated("deny")), inboundPod(annotated("cluster-unauthenticated"))},
			want: "default:cluster-unauthenticated unknown authz[default:cluster-unauthenticated{nets=10.0.0.0/8,fd00::/8}]"},
		{name: "malformed pod annotation: namespace's", objs: []any{namespaceObj("ns", annotated("audit")), inboundPod(annotated("allow-all"))},
			want: "default:audit unknown audit authz[]"},
		{name: "malformed both: cluster's", cluster: policyv1alpha1.Deny, objs: []any{namespaceObj("ns", annotated("nobody")), inboundPod(annotated("allow-all"))},
			want: "default:deny unknown authz[]"},
		{name: "no CRDs: default policy", noCRDs: true, objs: []any{srvDeny}, want: "default:all-unauthenticated unknown authz[default:all-unauthenticated{}]"},
		{name: "probe route and catch-all with a default policy", cluster: policyv1alpha1.Deny, port: 8080,
			want: "default:deny unknown authz[]" + catchAll8080},
		{name: "Server by number, accessPolicy deny by default", objs: []any{srvDeny},
			want: "Server:ns/web unknown authz[]"},
		{name: "Server by port name", port: 8080, objs: []any{server("named", "web", intstr.FromString("http"), policyv1alpha1.ClusterUnauthenticated, 1)},
			want: "Server:ns/named unknown authz[default:cluster-unauthenticated{nets=10.0.0.0/8,fd00::/8}]" + catchAll8080},
		{name: "Server selecting other pods", objs: []any{server("api", "api", intstr.FromInt32(9090), "", 1)},
			want: "default:all-unauthenticated unknown authz[default:all-unauthenticated{}]"},
		{name: "port name of another port", port: 9090, objs: []any{server("named", "web", intstr.FromString("http"), "", 1)},
			want: "default:all-unauthenticated unknown authz[default:all-unauthenticated{}]"},
		{name: "two Servers: the oldest", objs: []any{server("new", "web", intstr.FromInt32(9090), "", 1), server("old", "web", intstr.FromString("metrics"), policyv1alpha1.Audit, 100)},
			want: "Server:ns/old unknown audit authz[]"},
		{name: "accessPolicy all-authenticated, protocol", objs: []any{func() any {
			s := server("web", "web", intstr.FromInt32(9090), policyv1alpha1.AllAuthenticated, 1)
			s.Spec.ProxyProtocol = policyv1alpha1.ProtocolGRPC
			return s
		}()}, want: "Server:ns/web gRPC authz[default:all-authenticated{mtls}]"},
		{name: "MeshTLS identities and identityRefs", objs: []any{srvDeny, authzPolicy("ap", "Server/web", "MeshTLSAuthentication/ids"),
			meshTLS("ids", []string{idA, "*.other.serviceaccount.identity.linkerd.cluster.local"}), meshTLS("unused", nil, sa("b", "other"))},
			want: `Server:ns/web unknown authz[AuthorizationPolicy:ns/ap{mtls;ids=` + idA + `;prefixes=["spiffe://cluster.local/ns/other/sa/"]}]`},
		{name: "MeshTLS identities of another trust domain (a linked cluster's)", objs: []any{srvDeny, authzPolicy("ap", "Server/web", "MeshTLSAuthentication/ids"),
			meshTLS("ids", []string{"spiffe://a.example/ns/ns/sa/client", "*.other.serviceaccount.identity.plexus-system.a.example", "*.x.serviceaccount.identity.plexus-system.a/b"})},
			want: `Server:ns/web unknown authz[AuthorizationPolicy:ns/ap{mtls;ids=spiffe://a.example/ns/ns/sa/client;prefixes=["spiffe://a.example/ns/other/sa/"]}]`},
		{name: "identityRefs", objs: []any{srvDeny, authzPolicy("ap", "Server/web", "MeshTLSAuthentication/refs"), meshTLS("refs", nil, sa("a", ""), sa("b", "other"), nsRef)},
			want: `Server:ns/web unknown authz[AuthorizationPolicy:ns/ap{mtls;ids=` + idA + "," + idOther + `;prefixes=["spiffe://cluster.local/ns/other/sa/"]}]`},
		{name: "any identity", objs: []any{srvDeny, authzPolicy("ap", "Server/web", "MeshTLSAuthentication/any"), meshTLS("any", []string{"*"})},
			want: `Server:ns/web unknown authz[AuthorizationPolicy:ns/ap{mtls;prefixes=[""]}]`},
		{name: "no usable identity: nobody", objs: []any{srvDeny, authzPolicy("ap", "Server/web", "MeshTLSAuthentication/dns"), meshTLS("dns", []string{"*.example.org"})},
			want: "Server:ns/web unknown authz[]"},
		{name: "network and ServiceAccount, all required", objs: []any{srvDeny, authzPolicy("ap", "Server/web", "NetworkAuthentication/nets", "ServiceAccount/other/b"),
			networkAuthn("nets", policyv1alpha1.Network{CIDR: "10.1.0.0/16", Except: []string{"10.1.2.3"}}, policyv1alpha1.Network{CIDR: "fd00::1"})},
			want: "Server:ns/web unknown authz[AuthorizationPolicy:ns/ap{nets=10.1.0.0/16-10.1.2.3/32,fd00::1/128;mtls;ids=" + idOther + "}]"},
		{name: "missing authentication: nobody", objs: []any{srvDeny, authzPolicy("ap", "Server/web", "NetworkAuthentication/absent"), authzPolicy("open", "Server/web")},
			want: "Server:ns/web unknown authz[AuthorizationPolicy:ns/open{}]"},
		{name: "namespace target, dry run, other Server", objs: []any{srvWeb, authzPolicy("all", "Namespace/ns"), authzPolicy("elsewhere", "Namespace/other"), authzPolicy("api", "Server/api"), dryRun},
			port: 8080, want: "Server:ns/web unknown authz[AuthorizationPolicy:ns/all{} AuthorizationPolicy:ns/dry{dry} default:all-unauthenticated{}]" + catchAll8080},
		{name: "routes with their policies and the probe route", port: 8080, objs: []any{srvWeb, routeToServer("admin", "web", "POST", "/admin"), grpcRoute,
			authzPolicy("admins", "HTTPRoute/admin", "ServiceAccount/a"), authzPolicy("rpc", "GRPCRoute/rpc")},
			want: "Server:ns/web unknown authz[default:all-unauthenticated{}] routes[GRPCRoute:ns/rpc (^/shop.Cart/) authz[AuthorizationPolicy:ns/rpc{}] | " +
				"HTTPRoute:ns/admin (POST =/admin) authz[AuthorizationPolicy:ns/admins{mtls;ids=" + idA + "}] | " + probes8080 + "]"},
		{name: "rate limit", objs: []any{srvDeny, limit},
			want: "Server:ns/web unknown authz[] rl[HTTPLocalRateLimitPolicy:ns/limit total=100 identity=20 50:" + idA + "," + idOther + "]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := tc.objs
			if !slices.ContainsFunc(objs, func(o any) bool { _, ok := o.(*corev1.Pod); return ok }) {
				objs = append(objs, inboundPod(nil))
			}
			cfg := DefaultConfig()
			cfg.VerifyInboundCaller = false
			cfg.ClusterNetworks = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/8")}
			if tc.cluster != "" {
				cfg.DefaultInboundPolicy = tc.cluster
			}
			port := cmp.Or(tc.port, 9090)
			c := startCluster(t, clusterOptions{crds: !tc.noCRDs, inbound: true, cfg: &cfg}, objs...)
			got := inboundSummary(c.watchInbound(t, "ns", "web", port).next(t, wait))
			if got != tc.want {
				t.Errorf("policy\n got %s\nwant %s", got, tc.want)
			}
			if got := inboundSummary(computeFromObjects(t, cfg, !tc.noCRDs, objs, uint16(port))); got != tc.want {
				t.Errorf("ComputeInboundPolicy from the listed objects\n got %s\nwant %s", got, tc.want)
			}
		})
	}
}
