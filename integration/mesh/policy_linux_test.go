package mesh

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/plexus-mesh/plexus/integration/clustercni"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
	"github.com/plexus-mesh/plexus/testsupport/clustertest"
)

// TestPolicy proves authorization policy (issue 15, ARCHITECTURE.md §9) on the
// real cluster: who may talk to whom, enforced by the server's proxy.
//
// Namespace policy (default inbound policy deny, by namespace annotation)
// holds the clients a (service account client-a), b (client-b), plain
// (unmeshed) and the servers; namespace policy-other (default audit)
// holds the client other (meshed, another namespace) and the server
// audit. Every server runs testapp serve with HTTP on 8080 (probed by the
// kubelet: readiness and liveness GET /healthz), gRPC on 9090 and HTTP
// on 7070, which the pod annotation config.plexus.dev/opaque-ports makes
// opaque TCP; a Service of the same name exposes the three (80, 9090,
// 7070). The clients are idle pods the test runs `testapp load` in.
//
// The matrix: each client sends 3 requests to each server over HTTP/1.1,
// gRPC (Health/Check) and opaque TCP, and every cell is asserted
// (authzMatrix): allowed is 200 (or OK) answered by the server app;
// denied is 403 with plexus-proxy-error: unauthorized, gRPC
// PermissionDenied from a trailers-only answer (not from an HTTP 403,
// which grpc-go would map to the same code), or, opaque, the connection
// closed without an answer (refused); no route is 404 route-not-found.
// The servers:
//   - deny: the namespace's default deny. Nobody.
//   - authn: pod annotation all-authenticated. a, b, other; not plain.
//   - mtls: a Server per port with an AuthorizationPolicy requiring the
//     MeshTLSAuthentication a-only (identities: a's SPIFFE ID). a only.
//   - network: a Server per port with an AuthorizationPolicy requiring the
//     NetworkAuthentication pod-network: the cluster's pod network
//     (every node's pods, integration/cluster/env.sh's CLUSTER_POD_CIDR)
//     except b's address. a, plain, other; not b (the except proves the network is
//     what decides).
//   - routes: HTTP Server with the HTTPRoutes public (GET /public,
//     AuthorizationPolicy without authentications: everyone) and admin
//     (/admin, a only); any other path is 404 route-not-found. gRPC Server
//     with the GRPCRoute health (a only). Opaque Server with an
//     AuthorizationPolicy without authentications: everyone.
//
// The server proxies' metrics are asserted per cell too: each meshed
// client counted allowed or denied (inbound_http_authz_*, opaque
// inbound_tcp_authz_*) under the srv_kind, srv_name, srv_port (and, on
// the routes server, route_name) of the policy that decided, and never
// the other way. The proxies' admin port obeys the policy too, so a
// Server on port 4191 of the servers with an AuthorizationPolicy
// requiring the NetworkAuthentication anywhere (0.0.0.0/0) lets the test
// read them through the API server, as a Linkerd user authorizes
// Prometheus.
//
// Then:
//   - audit: a and plain reach audit over the three protocols; its proxy
//     counts every request as denied with dry_run="true", nothing denied
//     for real, and logs "would be denied" for each client.
//   - dry run: server dryrun's Server has an AuthorizationPolicy allowing
//     a only (a ServiceAccount reference) and one annotated
//     policy.plexus.dev/dry-run: "true"; b's requests succeed, counted
//     denied with dry_run="true" and logged. (The control is the matrix:
//     mtls, with the same policy and no dry run, denies b.)
//   - revocation: a loads server revoke (Servers for HTTP and opaque,
//     allowing a through a MeshTLSAuthentication by identityRefs) at 20
//     requests per second over one keep-alive connection per protocol;
//     the AuthorizationPolicies are deleted after ~3 s: every request
//     started 1 s or more after the deletion fails, every one before it
//     succeeded, and inbound_tcp_authz_terminate_total counts the closed
//     connections. On the opaque port only closing the connection can do
//     that: its connection was authorized once, when it opened.
//   - control plane down: with plexus-destination scaled to 0, a keeps
//     being allowed and b denied by mtls; a server created meanwhile
//     (late) stays not ready and its proxy's /ready says it has no inbound
//     policy for port 8080; once destination is back it becomes ready.
//   - rate limit: servers limited and limited-share have a Server on 7070
//     (HTTP there: their pods' opaque-ports annotation lists no port; the
//     kubelet probes 8080, so its probes are neither charged nor refused)
//     with accessPolicy all-unauthenticated and an
//     HTTPLocalRateLimitPolicy. limited: total 100/s; a sends 300
//     requests a second for 6 s, and from its second second on 100 ± 10
//     a second are answered 200 by the app, every other request 429
//     plexus-proxy-error: rate-limited by the proxy, counted in
//     inbound_http_local_ratelimit_total. limited-share: 50/s per
//     identity, other's ServiceAccount (another namespace) overridden to
//     100/s, total 250/s; a, b and other send 150 a second each at the
//     same time: a and b get 50 ± 8 a second, other 100 ± 10 (the total
//     is charged only for what the identities' buckets admitted, or other
//     would get less).
//   - probes: every server pod became Ready through its proxy (the
//     kubelet's probes pass under every policy above, deny included and
//     revoke's Server left without any authorization) and stayed Ready
//     without a restart.
func TestPolicy(t *testing.T) {
	env := clustercni.Read(t)
	c := clustertest.Connect(t)
	env.Install(t)
	installAuthzCRDs(t, c)
	deployControlPlane(t, c)
	c.WaitDeploymentReady(t, controlNamespace, "plexus-injector", 2*time.Minute)
	p := deployAuthz(t, c)

	t.Run("matrix: 4 clients × 5 servers × HTTP, gRPC and opaque TCP, every cell and its metrics", p.matrix)
	t.Run("audit: traffic flows, counted and logged as it would have been denied", p.audit)
	t.Run("dry run: b passes a policy for a alone, counted and logged as denied with dry_run", p.dryRun)
	t.Run("rate limit: a Server's total held under three times the load; identities get their share, an override its own", p.rateLimit)
	t.Run("revocation: deleting the AuthorizationPolicy closes a's keep-alive connections within 1s", p.revocation)
	t.Run("control plane down: policies kept, a new pod fail-closed and not ready, with the reason", p.controlPlaneDown)
	t.Run("probes: every server pod became Ready and stayed Ready", p.probes)
	t.Run("locked down, still operable: under deny a proxy's metrics are refused to others and read by plexusctl diagnostics", p.lockedDown)
}

// lockedDown: a pod of the default-deny namespace whose admin port no
// Server selects refuses its metrics to a client from outside the pod
// (the API server's pod proxy), and an operator still reads them with
// plexusctl diagnostics proxy-metrics (a port-forward: the pod's loopback).
func (p *authzTest) lockedDown(t *testing.T) {
	ctl := newPlexusctl(t, p.c)
	deploy(t, p.c, p.ns, "locked", 1, meshed, podSpec("locked", "serve", ":8080"))
	p.c.WaitDeploymentReady(t, p.ns, "locked", 3*time.Minute)
	pod := pods(t, p.c, p.ns, "locked")[0]
	ctx := clustertest.Context(t, 30*time.Second)
	raw, err := p.c.Client.CoreV1().Pods(p.ns).ProxyGet("http", pod.Name, "4191", "/metrics", nil).DoRaw(ctx)
	if !apierrors.IsForbidden(err) {
		t.Errorf("the admin port of a pod under deny answered the API server's proxy: %v %.200s", err, raw)
	}
	out, err := ctl("diagnostics", "proxy-metrics", "po/"+pod.Name, "-n", p.ns)
	if err != nil || !strings.Contains(out, "inbound_http_authz_deny_total") && !strings.Contains(out, "process_start_time_seconds") {
		t.Errorf("plexusctl diagnostics proxy-metrics under deny: %v\n%.500s", err, out)
	}
}

// The annotations the test sets.
var (
	defaultInboundPolicyAnnotation = podcontract.AnnotationPrefix + "default-inbound-policy"
	dryRunAnnotation               = "policy.plexus.dev/dry-run"
)

// authzServerLabel marks the server pods (the admin port's Server selects
// them).
const authzServerLabel = "policy-test"

// The servers' ports and protocols.
const (
	protoHTTP   = "http"
	protoGRPC   = "grpc"
	protoOpaque = "opaque"
)

var authzPorts = map[string]int32{protoHTTP: 8080, protoGRPC: 9090, protoOpaque: 7070}

// authzCRDs are the CRDs of policy.plexus.dev, from deploy/crds.
var authzCRDs = []string{
	"servers.policy.plexus.dev", "authorizationpolicies.policy.plexus.dev", "meshtlsauthentications.policy.plexus.dev",
	"networkauthentications.policy.plexus.dev", "httplocalratelimitpolicies.policy.plexus.dev",
}

// installAuthzCRDs installs the Gateway API route CRDs (installRouteCRDs)
// and the policy CRDs (deploy/crds/policy-*.yaml), waits until the
// latter are established and, when the test ends, deletes the policy
// CRDs that were not there before.
func installAuthzCRDs(t *testing.T, c *clustertest.Cluster) {
	t.Helper()
	ctx := clustertest.Context(t, 2*time.Minute)
	have, err := kubectlOutput(ctx, c, "", "get", "crd", "-o", "name")
	if err != nil {
		t.Fatal(err)
	}
	var installed []string
	for _, name := range authzCRDs {
		if !strings.Contains(have, "/"+name+"\n") {
			installed = append(installed, name)
		}
	}
	t.Cleanup(func() {
		if len(installed) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := kubectlOutput(ctx, c, "", append([]string{"delete", "crd"}, installed...)...); err != nil {
			t.Errorf("deleting the policy CRDs the test installed: %v", err)
		}
	})
	installRouteCRDs(t, c)
	files, err := filepath.Glob("../../deploy/crds/policy-*.yaml")
	if err != nil || len(files) != len(authzCRDs) {
		t.Fatalf("deploy/crds/policy-*.yaml: %d files (%v), want %d", len(files), err, len(authzCRDs))
	}
	var fileArgs []string
	for _, f := range files {
		fileArgs = append(fileArgs, "-f", f)
	}
	for _, args := range [][]string{{"apply", "--server-side", "--force-conflicts"}, {"wait", "--for=condition=Established", "--timeout=60s"}} {
		if _, err := kubectlOutput(ctx, c, "", append(args, fileArgs...)...); err != nil {
			t.Fatal(err)
		}
	}
}

// authzTest is what TestPolicy deployed.
type authzTest struct {
	c         *clustertest.Cluster
	ns, other string // the servers' namespace (default deny), the other's (default audit)
	clients   [4]authzClient
	readyAt   time.Time // every server pod was Ready by then
}

// The clients, in the order of authzClient arrays and the matrix's rows.
const (
	clientA = iota
	clientB
	clientPlain
	clientOther
)

// authzClient is a client pod: where testapp load runs.
type authzClient struct {
	loadClient
	id string // its mesh identity; "" for the unmeshed one
	ip netip.Addr
}

// authzServers are the server Deployments of the servers' namespace.
var authzServers = []string{"deny", "authn", "mtls", "network", "routes", "dryrun", "revoke", "limited", "limited-share"}

// authzServerAnnotations are the annotations a server's pods get beyond
// deployServer's.
var authzServerAnnotations = map[string]map[string]string{
	"authn": {defaultInboundPolicyAnnotation: "all-authenticated"},
	// No opaque port: 7070, where their rate limits are, speaks HTTP.
	"limited":       {podcontract.AnnotationOpaquePorts: ""},
	"limited-share": {podcontract.AnnotationOpaquePorts: ""},
}

// deployAuthz creates the two namespaces, the clients, the servers and
// their Services, then (once the clients have addresses, which the
// NetworkAuthentication names) the policies, waits until everything is
// ready and until the policies have reached the servers' proxies.
func deployAuthz(t *testing.T, c *clustertest.Cluster) *authzTest {
	t.Helper()
	p := &authzTest{c: c, ns: c.Namespace(t, "policy", meshLabels), other: c.Namespace(t, "policy-other", meshLabels)}
	p.setDefaultPolicy(t, p.ns, "deny")
	p.setDefaultPolicy(t, p.other, "audit")

	idle := []string{"serve", ":8080"} // the tests exec testapp load in it
	deploy(t, c, p.ns, "client-a", 1, meshed, podSpec("client-a", idle...))
	deploy(t, c, p.ns, "client-b", 1, meshed, podSpec("client-b", idle...))
	deploy(t, c, p.ns, "plain", 1, unmeshed, podSpec("plain", idle...))
	deploy(t, c, p.other, "other", 1, meshed, podSpec("other", idle...))
	for _, app := range authzServers {
		p.deployServer(t, p.ns, app, authzServerAnnotations[app])
	}
	p.deployServer(t, p.other, "audit", nil)

	for i, cl := range []struct{ ns, name, sa string }{
		{p.ns, "client-a", "client-a"}, {p.ns, "client-b", "client-b"}, {p.ns, "plain", ""}, {p.other, "other", "other"},
	} {
		c.WaitDeploymentReady(t, cl.ns, cl.name, 3*time.Minute)
		pod := pods(t, c, cl.ns, cl.name)[0]
		ip, err := netip.ParseAddr(pod.Status.PodIP)
		if err != nil {
			t.Fatalf("client %s has no address: %q", pod.Name, pod.Status.PodIP)
		}
		p.clients[i] = authzClient{loadClient: loadClient{&routesTest{c: c, ns: cl.ns, client: pod.Name}, cl.name}, ip: ip}
		if cl.sa != "" {
			p.clients[i].id = "spiffe://" + trustDomain + "/ns/" + cl.ns + "/sa/" + cl.sa
		}
	}
	podNet := p.podNetwork(t)
	if _, err := kubectlOutput(clustertest.Context(t, time.Minute), c, p.manifest(podNet), "apply", "-f", "-"); err != nil {
		t.Fatal(err)
	}
	for _, app := range authzServers {
		c.WaitDeploymentReady(t, p.ns, app, 3*time.Minute)
	}
	c.WaitDeploymentReady(t, p.other, "audit", 3*time.Minute)
	p.readyAt = time.Now()

	// The policies were applied while the servers started: wait until
	// the proxies have them (each of these cells is asserted again in the
	// matrix).
	a, b, plain := p.clients[clientA], p.clients[clientB], p.clients[clientPlain]
	settle := []struct {
		cl   authzClient
		tg   authzTarget
		want authzOutcome
	}{
		{a, authzTarget{app: "mtls", proto: protoHTTP, path: "/"}, allowed},
		{b, authzTarget{app: "mtls", proto: protoHTTP, path: "/"}, denied},
		{a, authzTarget{app: "network", proto: protoHTTP, path: "/"}, allowed},
		{b, authzTarget{app: "network", proto: protoHTTP, path: "/"}, denied},
		{a, authzTarget{app: "routes", proto: protoHTTP, path: "/admin"}, allowed},
		{b, authzTarget{app: "routes", proto: protoHTTP, path: "/admin"}, denied},
		{plain, authzTarget{app: "authn", proto: protoHTTP, path: "/"}, denied},
	}
	began := time.Now()
	clustertest.WaitFor(t, time.Minute, "the policies to reach the servers' proxies", func(ctx context.Context) (bool, error) {
		for _, s := range settle {
			res, err := p.try(ctx, s.cl, s.tg, 1)
			if err != nil {
				return false, err
			}
			if err := s.want.check(s.tg, res, 1); err != nil {
				return false, fmt.Errorf("%s from %s: %w", s.tg, s.cl.name, err)
			}
		}
		return true, nil
	})
	t.Logf("servers ready at %s; policies in force %v later (pod network %s)", p.readyAt.Format(time.TimeOnly), time.Since(began).Round(time.Millisecond), podNet)
	return p
}

// setDefaultPolicy annotates namespace ns with a default inbound policy
// (before its pods are created: the injector copies it onto them).
func (p *authzTest) setDefaultPolicy(t *testing.T, ns, policy string) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{defaultInboundPolicyAnnotation: policy}}})
	if _, err := p.c.Client.CoreV1().Namespaces().Patch(clustertest.Context(t, time.Minute), ns, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotating namespace %s: %v", ns, err)
	}
}

// deployServer deploys app, one meshed replica of testapp serving HTTP on
// 8080 (probed by the kubelet), gRPC on 9090 and HTTP on 7070, declared
// as container ports (the proxy asks for their policies at start) and
// 7070 opaque by annotation, with annotations added to its pods (or
// replacing that one); and Service app: port 80 to 8080, 9090 and 7070.
func (p *authzTest) deployServer(t *testing.T, ns, app string, annotations map[string]string) {
	t.Helper()
	spec := podSpec(app, "serve", "-grpc", ":9090", ":8080", ":7070")
	ctr := &spec.Containers[0]
	ctr.Ports = []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "grpc", ContainerPort: 9090}, {Name: "opaque", ContainerPort: 7070}}
	healthz := corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromInt32(8080)}}
	ctr.ReadinessProbe = &corev1.Probe{ProbeHandler: healthz, PeriodSeconds: 2, TimeoutSeconds: 2, FailureThreshold: 2}
	ctr.LivenessProbe = &corev1.Probe{ProbeHandler: healthz, PeriodSeconds: 5, TimeoutSeconds: 2, FailureThreshold: 3}
	// Created without replicas, then given its label, annotations and
	// replica: deploy's pods carry only app=NAME.
	deploy(t, p.c, ns, app, 0, meshed, spec)
	a := map[string]string{podcontract.AnnotationOpaquePorts: "7070"}
	maps.Copy(a, annotations)
	patch, _ := json.Marshal(map[string]any{"spec": map[string]any{
		"replicas": 1,
		"template": map[string]any{"metadata": map[string]any{"labels": map[string]string{authzServerLabel: "server"}, "annotations": a}},
	}})
	ctx := clustertest.Context(t, time.Minute)
	if _, err := p.c.Client.AppsV1().Deployments(ns).Patch(ctx, app, types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("patching deployment %s: %v", app, err)
	}
	_, err := p.c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: app},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": app}, Ports: []corev1.ServicePort{
			{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)},
			{Name: "grpc", Port: 9090, TargetPort: intstr.FromInt32(9090), AppProtocol: ptr("grpc")},
			{Name: "opaque", Port: 7070, TargetPort: intstr.FromInt32(7070)},
		}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating service %s: %v", app, err)
	}
}

// podNetwork is the cluster's pod network, every node's pods
// (CLUSTER_POD_CIDR of integration/cluster/env.sh: the clients may be on
// any node); every client must be in it, or the network cells prove
// nothing.
func (p *authzTest) podNetwork(t *testing.T) netip.Prefix {
	t.Helper()
	const cidr = "10.244.0.0/16"
	net, err := netip.ParsePrefix(cidr)
	if err != nil {
		t.Fatalf("pod network %q: %v", cidr, err)
	}
	for _, cl := range p.clients {
		if !net.Contains(cl.ip) {
			t.Fatalf("client %s at %s is outside the pod network %s", cl.name, cl.ip, net)
		}
	}
	return net.Masked()
}

// manifest is every policy object of the test.
func (p *authzTest) manifest(podNet netip.Prefix) string {
	docs := []string{
		authzObject("MeshTLSAuthentication", "a-only", nil, `
  identities: ["spiffe://{{td}}/ns/{{ns}}/sa/client-a"]`),
		authzObject("MeshTLSAuthentication", "a-by-ref", nil, `
  identityRefs: [{kind: ServiceAccount, name: client-a}]`),
		authzObject("MeshTLSAuthentication", "b-only", nil, `
  identities: ["spiffe://{{td}}/ns/{{ns}}/sa/client-b"]`),
		authzObject("NetworkAuthentication", "pod-network", nil, `
  networks: [{cidr: "{{podnet}}", except: ["{{bip}}/32"]}]`),
		authzObject("NetworkAuthentication", "anywhere", nil, `
  networks: [{cidr: 0.0.0.0/0}]`),
		// The proxies' admin port, for the test's scrapes.
		authzServer("admin", authzServerLabel+": server", 4191, "HTTP/1"),
		authzPolicy("admin", "Server/admin", false, "NetworkAuthentication/anywhere"),
	}
	for _, app := range []string{"mtls", "network", "routes"} {
		for _, proto := range []string{protoHTTP, protoGRPC, protoOpaque} {
			docs = append(docs, authzServer(app+"-"+proto, "app: "+app, authzPorts[proto], map[string]string{protoHTTP: "HTTP/1", protoGRPC: "gRPC", protoOpaque: "opaque"}[proto]))
			switch app {
			case "mtls":
				docs = append(docs, authzPolicy(app+"-"+proto, "Server/"+app+"-"+proto, false, "MeshTLSAuthentication/a-only"))
			case "network":
				docs = append(docs, authzPolicy(app+"-"+proto, "Server/"+app+"-"+proto, false, "NetworkAuthentication/pod-network"))
			}
		}
	}
	docs = append(docs,
		authzRoute("HTTPRoute", "public", "routes-http", `[{path: {type: Exact, value: /public}, method: GET}]`),
		authzRoute("HTTPRoute", "admin", "routes-http", `[{path: {type: PathPrefix, value: /admin}}]`),
		authzRoute("GRPCRoute", "health", "routes-grpc", `[{method: {service: grpc.health.v1.Health}}]`),
		authzPolicy("public", "HTTPRoute/public", false),
		authzPolicy("admin-route", "HTTPRoute/admin", false, "MeshTLSAuthentication/a-only"),
		authzPolicy("health", "GRPCRoute/health", false, "MeshTLSAuthentication/a-only"),
		authzPolicy("routes-opaque", "Server/routes-opaque", false),

		authzServer("dryrun-http", "app: dryrun", 8080, "HTTP/1"),
		authzPolicy("dryrun-enforced", "Server/dryrun-http", false, "ServiceAccount/client-a"),
		authzPolicy("dryrun-trial", "Server/dryrun-http", true, "MeshTLSAuthentication/b-only"),

		authzServer("revoke-http", "app: revoke", 8080, "HTTP/1"),
		authzServer("revoke-opaque", "app: revoke", 7070, "opaque"),
		authzPolicy("revoke-http", "Server/revoke-http", false, "MeshTLSAuthentication/a-by-ref"),
		authzPolicy("revoke-opaque", "Server/revoke-opaque", false, "MeshTLSAuthentication/a-by-ref"),

		limitedServer("limited"),
		authzObject("HTTPLocalRateLimitPolicy", "limited", nil, `
  targetRef: {group: policy.plexus.dev, kind: Server, name: limited-http}
  total: {requestsPerSecond: 100}`),
		limitedServer("limited-share"),
		authzObject("HTTPLocalRateLimitPolicy", "limited-share", nil, `
  targetRef: {group: policy.plexus.dev, kind: Server, name: limited-share-http}
  total: {requestsPerSecond: 250}
  identity: {requestsPerSecond: 50}
  overrides: [{requestsPerSecond: 100, clientRefs: [{kind: ServiceAccount, name: other, namespace: "{{other}}"}]}]`),
	)
	return strings.NewReplacer("{{ns}}", p.ns, "{{other}}", p.other, "{{td}}", trustDomain, "{{podnet}}", podNet.String(),
		"{{bip}}", p.clients[clientB].ip.String()).Replace(strings.Join(docs, "---"))
}

// authzObject is a policy.plexus.dev object of the servers' namespace
// with spec (YAML indented by two spaces).
func authzObject(kind, name string, annotations map[string]string, spec string) string {
	a := "{}"
	if len(annotations) > 0 {
		b, _ := json.Marshal(annotations)
		a = string(b)
	}
	return fmt.Sprintf(`
apiVersion: policy.plexus.dev/v1alpha1
kind: %s
metadata: {name: %s, namespace: "{{ns}}", annotations: %s}
spec:%s
`, kind, name, a, spec)
}

// authzServer is a Server of port whose podSelector matches the label
// "key: value".
func authzServer(name, label string, port int32, protocol string) string {
	return authzObject("Server", name, nil, fmt.Sprintf(`
  podSelector: {matchLabels: {%s}}
  port: %d
  proxyProtocol: %s`, label, port, protocol))
}

// limitedServer is the Server app-http of port 7070 of app's pods (HTTP
// there, by their annotation), open to every client: rate limits apply
// to requests it authorizes.
func limitedServer(app string) string {
	return authzObject("Server", app+"-http", nil, fmt.Sprintf(`
  podSelector: {matchLabels: {app: %s}}
  port: %d
  proxyProtocol: HTTP/1
  accessPolicy: all-unauthenticated`, app, authzPorts[protoOpaque]))
}

// authzPolicy is an AuthorizationPolicy of target ("Server/NAME",
// "HTTPRoute/NAME", "GRPCRoute/NAME") requiring authentications
// ("MeshTLSAuthentication/NAME", "ServiceAccount/NAME", ...); none:
// every client.
func authzPolicy(name, target string, dryRun bool, authentications ...string) string {
	kind, targetName, _ := strings.Cut(target, "/")
	group := "policy.plexus.dev"
	if strings.HasSuffix(kind, "Route") {
		group = "gateway.networking.k8s.io"
	}
	refs := make([]string, len(authentications))
	for i, a := range authentications {
		k, n, _ := strings.Cut(a, "/")
		if k == "ServiceAccount" {
			refs[i] = fmt.Sprintf("{kind: %s, name: %s}", k, n)
		} else {
			refs[i] = fmt.Sprintf("{group: policy.plexus.dev, kind: %s, name: %s}", k, n)
		}
	}
	var annotations map[string]string
	if dryRun {
		annotations = map[string]string{dryRunAnnotation: "true"}
	}
	return authzObject("AuthorizationPolicy", name, annotations, fmt.Sprintf(`
  targetRef: {group: %s, kind: %s, name: %s}
  requiredAuthenticationRefs: [%s]`, group, kind, targetName, strings.Join(refs, ", ")))
}

// authzRoute is an HTTPRoute or GRPCRoute whose parent is Server server,
// with one rule of matches.
func authzRoute(kind, name, server, matches string) string {
	return fmt.Sprintf(`
apiVersion: gateway.networking.k8s.io/v1
kind: %s
metadata: {name: %s, namespace: "{{ns}}"}
spec:
  parentRefs: [{group: policy.plexus.dev, kind: Server, name: %s}]
  rules:
  - matches: %s
`, kind, name, server, matches)
}

// authzOutcome is what a client should get.
type authzOutcome int

const (
	allowed authzOutcome = iota + 1
	denied               // 403 unauthorized, PermissionDenied, or refused
	noRoute              // 404 route-not-found
)

func (o authzOutcome) String() string {
	return map[authzOutcome]string{allowed: "allowed", denied: "denied", noRoute: "no route"}[o]
}

// authzTarget is a server port (and path) and the policy its proxy
// counts the requests under.
type authzTarget struct {
	app, proto, path string
	// srv is "KIND/NAME" of the policy that decides (srv_kind, srv_name):
	// "default/deny", "Server/mtls-http", ...
	srv string
	// route is the route_name requests are counted under, on a Server
	// with routes.
	route string
}

func (tg authzTarget) String() string {
	if tg.proto == protoHTTP {
		return tg.app + " " + tg.proto + " " + tg.path
	}
	return tg.app + " " + tg.proto
}

// srvLabels are the labels the target's requests are counted under.
func (tg authzTarget) srvLabels() []string {
	kind, name, _ := strings.Cut(tg.srv, "/")
	out := []string{`srv_kind="` + kind + `"`, `srv_name="` + name + `"`, fmt.Sprintf(`srv_port="%d"`, authzPorts[tg.proto])}
	if tg.route != "" {
		out = append(out, `route_name="`+tg.route+`"`)
	}
	return out
}

// authzCell is a row of the matrix: a target and the outcome of each
// client (a, b, plain, other).
type authzCell struct {
	tg   authzTarget
	want [4]authzOutcome
}

// authzMatrix is the acceptance matrix of issue 15.
var authzMatrix = func() []authzCell {
	var out []authzCell
	trio := func(app, srv string, want [4]authzOutcome) {
		for _, proto := range []string{protoHTTP, protoGRPC, protoOpaque} {
			s := srv
			if !strings.HasPrefix(srv, "default/") {
				s = srv + "-" + proto
			}
			out = append(out, authzCell{authzTarget{app: app, proto: proto, path: "/", srv: s}, want})
		}
	}
	//                                               a        b        plain    other
	trio("deny", "default/deny", [4]authzOutcome{denied, denied, denied, denied})
	trio("authn", "default/all-authenticated", [4]authzOutcome{allowed, allowed, denied, allowed})
	trio("mtls", "Server/mtls", [4]authzOutcome{allowed, denied, denied, denied})
	trio("network", "Server/network", [4]authzOutcome{allowed, denied, allowed, allowed})
	return append(out,
		authzCell{authzTarget{"routes", protoHTTP, "/public", "Server/routes-http", "public"}, [4]authzOutcome{allowed, allowed, allowed, allowed}},
		authzCell{authzTarget{"routes", protoHTTP, "/admin", "Server/routes-http", "admin"}, [4]authzOutcome{allowed, denied, denied, denied}},
		authzCell{authzTarget{"routes", protoHTTP, "/other", "Server/routes-http", ""}, [4]authzOutcome{noRoute, noRoute, noRoute, noRoute}},
		authzCell{authzTarget{"routes", protoGRPC, "/", "Server/routes-grpc", "health"}, [4]authzOutcome{allowed, denied, denied, denied}},
		authzCell{authzTarget{"routes", protoOpaque, "/", "Server/routes-opaque", ""}, [4]authzOutcome{allowed, allowed, allowed, allowed}},
	)
}()

// authzRequests is how many requests each cell sends.
const authzRequests = 3

// try sends n requests from cl to tg.
func (p *authzTest) try(ctx context.Context, cl authzClient, tg authzTarget, n int) (loadResult, error) {
	ns := p.ns
	if tg.app == "audit" {
		ns = p.other
	}
	host := tg.app + "." + ns + ".svc.cluster.local"
	args := []string{"-n", itoa(n), "-timeout", "5s"}
	switch tg.proto {
	case protoGRPC:
		args = append(args, "-grpc", host+":9090")
	case protoOpaque:
		args = append(args, "http://"+host+":7070"+tg.path)
	default:
		args = append(args, "http://"+host+tg.path)
	}
	return cl.tryLoad(ctx, args...)
}

// check returns nil when res, n requests to tg, is the outcome o.
func (o authzOutcome) check(tg authzTarget, res loadResult, n int) error {
	proxyErrors := func(reason string) int { return res.Errors["plexus-proxy-error: "+reason] }
	answeredByNoApp := len(res.Servers) == 0
	var ok bool
	switch {
	case res.Requests != n:
		ok = false
	case o == allowed && tg.proto == protoGRPC:
		ok = res.Statuses["OK"] == n && res.apps()[tg.app] == n
	case o == allowed:
		ok = res.Statuses["200"] == n && res.apps()[tg.app] == n
	case o == noRoute:
		ok = res.Statuses["404"] == n && proxyErrors("route-not-found") == n && answeredByNoApp
	case tg.proto == protoHTTP:
		ok = res.Statuses["403"] == n && proxyErrors("unauthorized") == n && answeredByNoApp
	case tg.proto == protoGRPC:
		// grpc-go maps an HTTP 403 to PermissionDenied as well; only its
		// message tells it from a trailers-only grpc-status 7.
		ok = res.Statuses["PermissionDenied"] == n && answeredByNoApp
		for e := range res.Errors {
			ok = ok && !strings.Contains(e, "unexpected HTTP status code")
		}
	default:
		ok = refused(res) && answeredByNoApp
	}
	if !ok {
		return fmt.Errorf("want %s, got %s %v", o, briefResult(res), res.Errors)
	}
	return nil
}

// refused reports whether every request's connection was closed without
// an answer, and soon (not a timeout): the client saw an error, or, when
// its own proxy read HTTP, that proxy's 5xx naming why.
func refused(res loadResult) bool {
	proxied := 0
	for e, k := range res.Errors {
		if strings.HasPrefix(e, "plexus-proxy-error: ") {
			proxied += k
		}
	}
	for s := range res.Statuses {
		if s != "error" && !strings.HasPrefix(s, "5") {
			return false
		}
	}
	return res.Requests > 0 && res.Statuses["error"]+proxied == res.Requests && res.Latency.Max < 3000
}

// briefResult is a load's statuses: "200×3", "403×3 (unauthorized×3)".
func briefResult(res loadResult) string {
	var parts, reasons []string
	for _, s := range slices.Sorted(maps.Keys(res.Statuses)) {
		parts = append(parts, fmt.Sprintf("%s×%d", s, res.Statuses[s]))
	}
	for _, e := range slices.Sorted(maps.Keys(res.Errors)) {
		if r, ok := strings.CutPrefix(e, "plexus-proxy-error: "); ok {
			reasons = append(reasons, fmt.Sprintf("%s×%d", r, res.Errors[e]))
		}
	}
	if len(reasons) > 0 {
		parts = append(parts, "("+strings.Join(reasons, " ")+")")
	}
	return strings.Join(parts, " ")
}

// matrix runs every cell, the clients at once (each its cells in turn),
// and asserts each, then the server proxies' metrics.
func (p *authzTest) matrix(t *testing.T) {
	before, readBefore := p.scrapeAll(t)
	results := make([][4]loadResult, len(authzMatrix))
	errs := make([][4]error, len(authzMatrix))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	began := time.Now()
	var wg sync.WaitGroup
	for i, cl := range p.clients {
		wg.Go(func() {
			for row, cell := range authzMatrix {
				results[row][i], errs[row][i] = p.try(ctx, cl, cell.tg, authzRequests)
			}
		})
	}
	wg.Wait()
	took := time.Since(began)
	after, readAfter := p.scrapeAll(t)

	var table []string
	for row, cell := range authzMatrix {
		line := fmt.Sprintf("%-20s", cell.tg)
		for i, cl := range p.clients {
			err := errs[row][i]
			if err == nil {
				err = cell.want[i].check(cell.tg, results[row][i], authzRequests)
			}
			if err != nil {
				t.Errorf("%s from %s: %v", cell.tg, cl.name, err)
			}
			line += fmt.Sprintf(" | %s: %s", cl.name, briefResult(results[row][i]))
		}
		table = append(table, line)
	}
	t.Logf("%d cells of %d requests in %v:\n%s", len(authzMatrix)*len(p.clients), authzRequests, took.Round(time.Millisecond), strings.Join(table, "\n"))
	if readBefore && readAfter {
		p.checkMatrixMetrics(t, before, after)
	}
}

// authzMetricWant is how a series of a server proxy's metrics should
// grow in the matrix.
type authzMetricWant struct {
	app, metric string
	labels      []string
	atLeast     float64
	zero        bool // must not grow: a meshed client is never counted the other way
}

// checkMatrixMetrics asserts the authorization metrics of every cell's
// server: the requests of an allowed client counted allowed, those of a
// denied one denied (dry_run="false"), by the policy that decided; a
// meshed client never counted the other way. Opaque cells count
// connections (at least one), others requests. The unmeshed client's
// client_id is "", shared with the kubelet's probes (allowed), so only
// its counts are checked, not its zeros.
func (p *authzTest) checkMatrixMetrics(t *testing.T, before, after map[string]string) {
	t.Helper()
	wants := map[string]*authzMetricWant{}
	add := func(app, metric string, labels []string, n float64, zero bool) {
		key := app + " " + metric + "{" + strings.Join(labels, ",") + "}"
		w := wants[key]
		if w == nil {
			w = &authzMetricWant{app: app, metric: metric, labels: labels, zero: true}
			wants[key] = w
		}
		if !zero {
			w.atLeast += n
			w.zero = false
		}
	}
	for _, cell := range authzMatrix {
		kind, n := "http", float64(authzRequests)
		if cell.tg.proto == protoOpaque {
			kind, n = "tcp", 1
		}
		allow, deny := "inbound_"+kind+"_authz_allow_total", "inbound_"+kind+"_authz_deny_total"
		for i, cl := range p.clients {
			labels := append(cell.tg.srvLabels(), `client_id="`+cl.id+`"`)
			denyLabels := append(slices.Clone(labels), `dry_run="false"`)
			meshedClient := cl.id != ""
			switch cell.want[i] {
			case allowed:
				add(cell.tg.app, allow, labels, n, false)
				if meshedClient {
					add(cell.tg.app, deny, denyLabels, 0, true)
				}
			case denied:
				add(cell.tg.app, deny, denyLabels, n, false)
				if meshedClient {
					add(cell.tg.app, allow, labels, 0, true)
				}
			}
		}
	}
	for _, key := range slices.Sorted(maps.Keys(wants)) {
		w := wants[key]
		got := grewBy(before[w.app], after[w.app], w.metric, w.labels...)
		switch {
		case w.zero && got != 0:
			t.Errorf("%s grew by %v, want 0", key, got)
		case !w.zero && got < w.atLeast:
			t.Errorf("%s grew by %v, want at least %v", key, got, w.atLeast)
		}
	}
	t.Logf("%d metric series of the server proxies checked", len(wants))
}

// scrapeAll reads the proxy metrics of every server of the servers'
// namespace, by app; ok is false when one could not be read.
func (p *authzTest) scrapeAll(t *testing.T) (pages map[string]string, ok bool) {
	t.Helper()
	pages, ok = map[string]string{}, true
	for _, app := range authzServers {
		page, read := p.metricsOf(t, p.ns, pods(t, p.c, p.ns, app)[0].Name)
		pages[app], ok = page, ok && read
	}
	return pages, ok
}

// metricsOf reads a pod's proxy metrics as proxyMetrics does, but a
// failure fails the test without ending it (ok false): the admin port
// obeys the policy (Server admin lets the test in), and a scrape refused
// must not hide the outcomes of the traffic.
func (p *authzTest) metricsOf(t *testing.T, ns, pod string) (page string, ok bool) {
	t.Helper()
	raw, err := p.c.Client.CoreV1().Pods(ns).ProxyGet("http", pod, "4191", "/metrics", nil).DoRaw(clustertest.Context(t, 30*time.Second))
	if err != nil {
		t.Errorf("metrics of %s/%s: %v %.200s", ns, pod, err, raw)
		return "", false
	}
	return string(raw), true
}

// wouldBeDenied counts the lines of a proxy log that report a request or
// connection let through that enforcement would deny, naming who (a
// client's address or identity).
func wouldBeDenied(log, who string) int {
	n := 0
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, "would be denied") && strings.Contains(l, who) {
			n++
		}
	}
	return n
}

// proxyLog is the log of a pod's proxy.
func (p *authzTest) proxyLog(t *testing.T, ns, pod string) string {
	t.Helper()
	log, err := p.c.Logs(clustertest.Context(t, 30*time.Second), ns, pod, "plexus-proxy")
	if err != nil {
		t.Fatal(err)
	}
	return log
}

func (p *authzTest) audit(t *testing.T) {
	pod := pods(t, p.c, p.other, "audit")[0].Name
	before, readBefore := p.metricsOf(t, p.other, pod)
	sent := map[string]int{protoHTTP: 5, protoGRPC: 3, protoOpaque: 3}
	clients := []authzClient{p.clients[clientA], p.clients[clientPlain]}
	ctx := clustertest.Context(t, time.Minute)
	for _, cl := range clients {
		for _, proto := range []string{protoHTTP, protoGRPC, protoOpaque} {
			tg := authzTarget{app: "audit", proto: proto, path: "/", srv: "default/audit"}
			res, err := p.try(ctx, cl, tg, sent[proto])
			if err == nil {
				err = allowed.check(tg, res, sent[proto])
			}
			if err != nil {
				t.Errorf("%s from %s: %v", tg, cl.name, err)
			}
		}
	}
	after, readAfter := p.metricsOf(t, p.other, pod)
	log := p.proxyLog(t, p.other, pod)
	for _, cl := range clients {
		var counted []string
		for _, proto := range []string{protoHTTP, protoGRPC, protoOpaque} {
			if !readBefore || !readAfter {
				break
			}
			tg := authzTarget{app: "audit", proto: proto, srv: "default/audit"}
			metric, want := "inbound_http_authz_deny_total", float64(sent[proto])
			if proto == protoOpaque {
				metric, want = "inbound_tcp_authz_deny_total", 1
			}
			labels := append(tg.srvLabels(), `client_id="`+cl.id+`"`, `dry_run="true"`)
			got := grewBy(before, after, metric, labels...)
			if got < want {
				t.Errorf("%s from %s: %s{%s} grew by %v, want at least %v", tg, cl.name, metric, strings.Join(labels, ","), got, want)
			}
			counted = append(counted, fmt.Sprintf("%s %v", proto, got))
		}
		who := cl.id
		if who == "" {
			who = `"` + cl.ip.String() + `"`
		}
		lines := wouldBeDenied(log, who)
		if lines == 0 {
			t.Errorf("the audit proxy's log has no line saying a request from %s (%s) would be denied", cl.name, who)
		}
		t.Logf("%s: counted denied with dry_run=\"true\": %s; %d log lines", cl.name, strings.Join(counted, ", "), lines)
	}
	for _, metric := range []string{"inbound_http_authz_deny_total", "inbound_tcp_authz_deny_total"} {
		if !readBefore || !readAfter {
			break
		}
		if got := grewBy(before, after, metric, `srv_name="audit"`, `dry_run="false"`); got != 0 {
			t.Errorf(`%s{srv_name="audit",dry_run="false"} grew by %v: audit denied for real`, metric, got)
		}
	}
}

func (p *authzTest) dryRun(t *testing.T) {
	const n = 5
	pod := pods(t, p.c, p.ns, "dryrun")[0].Name
	before, readBefore := p.metricsOf(t, p.ns, pod)
	tg := authzTarget{app: "dryrun", proto: protoHTTP, path: "/", srv: "Server/dryrun-http"}
	ctx := clustertest.Context(t, time.Minute)
	a, b := p.clients[clientA], p.clients[clientB]
	for _, cl := range []authzClient{a, b} {
		res, err := p.try(ctx, cl, tg, n)
		if err == nil {
			err = allowed.check(tg, res, n)
		}
		if err != nil {
			t.Errorf("%s from %s: %v", tg, cl.name, err)
		}
	}
	after, readAfter := p.metricsOf(t, p.ns, pod)
	id := func(cl authzClient) string { return `client_id="` + cl.id + `"` }
	for _, d := range []struct {
		what   string
		metric string
		labels []string
		want   float64 // at least; 0: exactly
	}{
		{"a allowed by the enforced policy", "inbound_http_authz_allow_total", append(tg.srvLabels(), id(a), `authz_name="dryrun-enforced"`), n},
		{"b counted denied in the dry run", "inbound_http_authz_deny_total", append(tg.srvLabels(), id(b), `dry_run="true"`), n},
		{"b never denied for real", "inbound_http_authz_deny_total", append(tg.srvLabels(), id(b), `dry_run="false"`), 0},
		{"b never counted allowed", "inbound_http_authz_allow_total", append(tg.srvLabels(), id(b)), 0},
	} {
		if !readBefore || !readAfter {
			break
		}
		got := grewBy(before, after, d.metric, d.labels...)
		if d.want == 0 && got != 0 || got < d.want {
			t.Errorf("%s: %s{%s} grew by %v, want %v", d.what, d.metric, strings.Join(d.labels, ","), got, d.want)
		}
		t.Logf("%s: %v", d.what, got)
	}
	if lines := wouldBeDenied(p.proxyLog(t, p.ns, pod), b.id); lines == 0 {
		t.Errorf("the dryrun proxy's log has no line saying a request from b (%s) would be denied", b.id)
	}
}

func (p *authzTest) rateLimit(t *testing.T) {
	t.Run("total 100/s under 300/s from a", p.rateLimitTotal)
	t.Run("50/s per identity to a and b at once, other's override 100/s", p.rateLimitShare)
}

// The rate-limit loads: each client sends at its rate for a while over
// several keep-alive connections; the first second is not measured (the
// buckets' burst, and the clients' connections opening).
const (
	rateLimitWarmup  = time.Second
	rateLimitTimeout = "2s"
)

// limitedURL is the rate-limited port of app.
func (p *authzTest) limitedURL(app string) string {
	return fmt.Sprintf("http://%s.%s.svc.cluster.local:%d/", app, p.ns, authzPorts[protoOpaque])
}

func (p *authzTest) rateLimitTotal(t *testing.T) {
	const (
		offered   = 300 // requests a second
		duration  = 6 * time.Second
		limit     = 100.0 // the policy's total
		tolerance = 10.0  // the acceptance's
	)
	a := p.clients[clientA]
	pod := pods(t, p.c, p.ns, "limited")[0].Name
	before, readBefore := p.metricsOf(t, p.ns, pod)
	res := timed(t, a.start(t, "-rate", itoa(offered), "-duration", duration.String(), "-c", "8", "-timeout", rateLimitTimeout,
		"-timeline", p.limitedURL("limited")))
	after, readAfter := p.metricsOf(t, p.ns, pod)

	admitted, limited := limitedAnswers(t, "limited", a.name, res)
	first, _ := span(res.Timeline)
	from, to := first.Add(rateLimitWarmup), first.Add(duration)
	secs := to.Sub(from).Seconds()
	sent, ok := countStatus(res.Timeline, from, to, "200")
	if got := float64(sent) / secs; got < 0.9*offered {
		t.Errorf("a sent %.1f requests a second from its second second on, want at least %v: the load is not three times the limit", got, 0.9*offered)
	}
	if got := float64(ok) / secs; got < limit-tolerance || got > limit+tolerance {
		t.Errorf("%.1f requests a second were admitted from a's second second on, want %v ± %v (%d of %d in %.1fs)",
			got, limit, tolerance, ok, sent, secs)
	}
	labels := []string{`srv_name="limited-http"`, fmt.Sprintf(`srv_port="%d"`, authzPorts[protoOpaque]),
		`ratelimit_kind="HTTPLocalRateLimitPolicy"`, `ratelimit_name="limited"`, `client_id="` + a.id + `"`}
	counted := checkRateLimitedCount(t, before, after, readBefore && readAfter, labels, limited)
	t.Logf("a sent %d requests in %.2fs: %d admitted, %d refused 429 (counted %v); from its second second on, %.1f/s sent, %.1f/s admitted (%d of %d)",
		res.Requests, res.Seconds, admitted, limited, counted, float64(sent)/secs, float64(ok)/secs, ok, sent)
}

func (p *authzTest) rateLimitShare(t *testing.T) {
	const (
		offered   = 150 // requests a second, each client
		duration  = 7 * time.Second
		minShared = 3 * time.Second // the measured window all three loads share, at least
	)
	loads := []struct {
		cl        authzClient
		want, tol float64
	}{
		{p.clients[clientA], 50, 8},       // identity.requestsPerSecond
		{p.clients[clientB], 50, 8},       // identity.requestsPerSecond
		{p.clients[clientOther], 100, 10}, // its override
	}
	pod := pods(t, p.c, p.ns, "limited-share")[0].Name
	before, readBefore := p.metricsOf(t, p.ns, pod)
	runs := make([]*runningLoad, len(loads))
	for i, l := range loads {
		runs[i] = l.cl.start(t, "-rate", itoa(offered), "-duration", duration.String(), "-c", "4", "-timeout", rateLimitTimeout,
			"-timeline", p.limitedURL("limited-share"))
	}
	results := make([]timedLoad, len(loads))
	for i, r := range runs {
		results[i] = timed(t, r)
	}
	after, readAfter := p.metricsOf(t, p.ns, pod)

	// The window every load sends in, past its first second: the
	// clients' shares are measured while all of them are loading.
	var from, to time.Time
	for i, res := range results {
		first, last := span(res.Timeline)
		if i == 0 || first.Add(rateLimitWarmup).After(from) {
			from = first.Add(rateLimitWarmup)
		}
		if i == 0 || last.Before(to) {
			to = last
		}
	}
	if shared := to.Sub(from); shared < minShared {
		t.Fatalf("the three loads sent together for %v past their first second, want at least %v: their shares cannot be compared", shared.Round(time.Millisecond), minShared)
	}
	secs := to.Sub(from).Seconds()
	var lines []string
	for i, l := range loads {
		res := results[i]
		admitted, limited := limitedAnswers(t, "limited-share", l.cl.name, res)
		sent, ok := countStatus(res.Timeline, from, to, "200")
		if got := float64(sent) / secs; got < 0.9*offered {
			t.Errorf("%s sent %.1f requests a second while all three loaded, want at least %v", l.cl.name, got, 0.9*offered)
		}
		if got := float64(ok) / secs; got < l.want-l.tol || got > l.want+l.tol {
			t.Errorf("%s: %.1f requests a second admitted while all three loaded, want %v ± %v (%d of %d in %.1fs)",
				l.cl.name, got, l.want, l.tol, ok, sent, secs)
		}
		labels := []string{`srv_name="limited-share-http"`, `ratelimit_name="limited-share"`, `client_id="` + l.cl.id + `"`}
		counted := checkRateLimitedCount(t, before, after, readBefore && readAfter, labels, limited)
		lines = append(lines, fmt.Sprintf("%s: %d sent, %d admitted, %d refused 429 (counted %v); together %.1f/s sent, %.1f/s admitted",
			l.cl.name, res.Requests, admitted, limited, counted, float64(sent)/secs, float64(ok)/secs))
	}
	t.Logf("the three loads sent together for %.2fs past their first second:\n%s", secs, strings.Join(lines, "\n"))
}

// limitedAnswers checks that every request of a load to a rate-limited
// server was admitted (200, answered by app) or refused by its proxy
// (429, plexus-proxy-error: rate-limited, the app never reached), and
// returns how many were each.
func limitedAnswers(t *testing.T, app, from string, res timedLoad) (admitted, limited int) {
	t.Helper()
	other := map[string]int{}
	for _, s := range res.Timeline {
		switch {
		case s.Status == "200":
			admitted++
		case s.Status == "429" && s.ProxyError == "rate-limited":
			limited++
		default:
			other[strings.TrimSpace(s.Status+" "+s.ProxyError)]++
		}
	}
	if len(other) > 0 {
		t.Errorf("%s to %s: %d requests neither admitted nor refused 429 rate-limited: %v %v", from, app, res.Requests-admitted-limited, other, res.Errors)
	}
	served := 0
	for _, n := range res.Servers {
		served += n
	}
	if res.apps()[app] != admitted || served != admitted {
		t.Errorf("%s to %s: %d requests admitted, %d answered by an app (%v): a refused request reached an app, or an admitted one was not the app's",
			from, app, admitted, served, res.Servers)
	}
	return admitted, limited
}

// span is when the first and the last request of a timeline started
// (workers fill it in request order, not start order).
func span(timeline []timedSample) (first, last time.Time) {
	lo, hi := timeline[0].StartUnixNano, timeline[0].StartUnixNano
	for _, s := range timeline {
		lo, hi = min(lo, s.StartUnixNano), max(hi, s.StartUnixNano)
	}
	return time.Unix(0, lo), time.Unix(0, hi)
}

// countStatus counts the requests of timeline started in [from, to), and
// those of them answered status.
func countStatus(timeline []timedSample, from, to time.Time, status string) (sent, answered int) {
	for _, s := range timeline {
		if at := s.start(); !at.Before(from) && at.Before(to) {
			sent++
			if s.Status == status {
				answered++
			}
		}
	}
	return sent, answered
}

// rateLimitSlack is how far inbound_http_local_ratelimit_total may be
// from the 429s a client saw.
const rateLimitSlack = 3

// checkRateLimitedCount asserts that the server proxy's
// inbound_http_local_ratelimit_total{labels} grew by the limited requests
// (within rateLimitSlack), when both scrapes were read; it returns the
// growth.
func checkRateLimitedCount(t *testing.T, before, after string, read bool, labels []string, limited int) float64 {
	t.Helper()
	if !read {
		return -1
	}
	got := grewBy(before, after, "inbound_http_local_ratelimit_total", labels...)
	if got < float64(limited-rateLimitSlack) || got > float64(limited+rateLimitSlack) {
		t.Errorf("inbound_http_local_ratelimit_total{%s} grew by %v, want the %d requests refused 429 (± %d)",
			strings.Join(labels, ","), got, limited, rateLimitSlack)
	}
	return got
}

func (p *authzTest) revocation(t *testing.T) {
	a := p.clients[clientA]
	pod := pods(t, p.c, p.ns, "revoke")[0].Name
	before, readBefore := p.metricsOf(t, p.ns, pod)
	host := "revoke." + p.ns + ".svc.cluster.local"
	args := []string{"-rate", "20", "-duration", "7s", "-c", "1", "-timeout", "2s", "-timeline"}
	runs := map[string]*runningLoad{
		protoHTTP:   a.start(t, append(args, "http://"+host+"/")...),
		protoOpaque: a.start(t, append(args, "http://"+host+":7070/")...),
	}
	// Both loads send over their connection for a while first.
	time.Sleep(3 * time.Second) // Sleep: 3s of load over the connections first, part of the scenario
	deleting := time.Now()
	p.c.Kubectl(t, "-n", p.ns, "delete", "authorizationpolicies.policy.plexus.dev", "revoke-http", "revoke-opaque")
	deleted := time.Now()
	for _, proto := range []string{protoHTTP, protoOpaque} {
		res := timed(t, runs[proto])
		var sentBefore, okBefore, sentLate, okLate int
		var lastOK time.Time
		for _, s := range res.Timeline {
			at, ok := s.start(), s.Status == "200"
			if at.Before(deleting) {
				sentBefore++
				if ok {
					okBefore++
				}
			}
			if !at.Before(deleted.Add(time.Second)) {
				sentLate++
				if ok {
					okLate++
				}
			}
			if ok && at.After(lastOK) {
				lastOK = at
			}
		}
		if sentBefore < 10 || okBefore != sentBefore {
			t.Errorf("%s: %d of the %d requests sent before the deletion succeeded; want all, and at least 10 (statuses %v %v)",
				proto, okBefore, sentBefore, res.Statuses, res.Errors)
		}
		if sentLate < 20 || okLate != 0 {
			t.Errorf("%s: %d of the %d requests started 1s or more after the deletion succeeded; want none of at least 20 (statuses %v %v)",
				proto, okLate, sentLate, res.Statuses, res.Errors)
		}
		t.Logf("%s: the last success started %v after the deletion returned (kubectl took %v); statuses %v %v",
			proto, lastOK.Sub(deleted).Round(time.Millisecond), deleted.Sub(deleting).Round(time.Millisecond), res.Statuses, res.Errors)
	}
	after, readAfter := p.metricsOf(t, p.ns, pod)
	for _, srv := range []string{"revoke-http", "revoke-opaque"} {
		if !readBefore || !readAfter {
			break
		}
		labels := []string{`srv_name="` + srv + `"`, `client_id="` + a.id + `"`}
		got := grewBy(before, after, "inbound_tcp_authz_terminate_total", labels...)
		if got < 1 {
			t.Errorf("inbound_tcp_authz_terminate_total{%s} grew by %v: no connection of a's was closed", strings.Join(labels, ","), got)
		}
		t.Logf("%s: %v of a's connections closed on revocation", srv, got)
	}
}

func (p *authzTest) controlPlaneDown(t *testing.T) {
	a, b := p.clients[clientA], p.clients[clientB]
	url := "http://mtls." + p.ns + ".svc.cluster.local/"
	// Running loads keep the clients' discovery of mtls in use (idle
	// subscriptions end after a minute) through the outage.
	args := []string{"-rate", "5", "-duration", "3m", "-c", "1", "-timeout", "2s", "-timeline", url}
	runA, runB := a.start(t, args...), b.start(t, args...)
	scale(t, p.c, controlNamespace, "plexus-destination", 0)
	down := time.Now()
	up := false
	t.Cleanup(func() {
		if !up {
			scale(t, p.c, controlNamespace, "plexus-destination", 1)
		}
	})

	p.deployServer(t, p.ns, "late", nil)
	var late corev1.Pod
	var ready string
	noPolicy := regexp.MustCompile(`no inbound policy[^\n]*\b8080\b`)
	clustertest.WaitFor(t, time.Minute, "the late pod's proxy to say it has no inbound policy for port 8080", func(ctx context.Context) (bool, error) {
		list, err := p.c.Client.CoreV1().Pods(p.ns).List(ctx, metav1.ListOptions{LabelSelector: "app=late"})
		if err != nil || len(list.Items) != 1 || list.Items[0].Status.PodIP == "" {
			return false, err
		}
		late = list.Items[0]
		ready = readyReason(ctx, p.c, p.ns, late.Name)
		if noPolicy.MatchString(ready) {
			return true, nil
		}
		return false, fmt.Errorf("/ready: %s", ready)
	})
	seen := time.Now()
	if clustertest.PodReady(&late) {
		t.Errorf("pod %s is ready without an inbound policy", late.Name)
	}
	t.Logf("%v after its creation, the late pod's proxy says: %s", seen.Sub(late.CreationTimestamp.Time).Round(time.Second), strings.TrimSpace(ready))

	for _, l := range []struct {
		run  *runningLoad
		name string
		want string
	}{{runA, "a", "200"}, {runB, "b", "403"}} {
		l.run.stop(t)
		res := timed(t, l.run)
		var during, wrong int
		for _, s := range res.Timeline {
			if s.start().After(down) {
				during++
				if s.Status != l.want {
					wrong++
				}
			}
		}
		if during < 5 || wrong != 0 {
			t.Errorf("with destination down, %d of %d requests from %s to mtls were not answered %s; want none of at least 5 (statuses %v %v)",
				wrong, during, l.name, l.want, res.Statuses, res.Errors)
		}
		t.Logf("%s: %d requests with destination down, %d not answered %s", l.name, during, wrong, l.want)
	}

	// Still not ready, seconds later, just before destination returns.
	again, err := p.c.Client.CoreV1().Pods(p.ns).Get(clustertest.Context(t, 30*time.Second), late.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if clustertest.PodReady(again) {
		t.Errorf("pod %s became ready %v after its creation, with destination still down", late.Name, time.Since(late.CreationTimestamp.Time).Round(time.Second))
	}
	scale(t, p.c, controlNamespace, "plexus-destination", 1)
	up = true
	back := time.Now()
	p.c.WaitDeploymentReady(t, p.ns, "late", 2*time.Minute)
	t.Logf("destination was down %v; the late pod became ready %v after it returned",
		back.Sub(down).Round(time.Second), time.Since(back).Round(time.Second))
}

// readyReason is the answer of a pod's proxy to GET /ready (the admin
// port answers it before any policy has arrived).
func readyReason(ctx context.Context, c *clustertest.Cluster, ns, pod string) string {
	raw, err := c.Client.CoreV1().Pods(ns).ProxyGet("http", pod, "4191", "/ready", nil).DoRaw(ctx)
	if err != nil {
		return string(raw) + " (" + err.Error() + ")"
	}
	return string(raw)
}

func (p *authzTest) probes(t *testing.T) {
	servers := [][2]string{{p.other, "audit"}} // namespace, app
	for _, app := range authzServers {
		servers = append(servers, [2]string{p.ns, app})
	}
	checked := 0
	for _, s := range servers {
		running := pods(t, p.c, s[0], s[1])
		if len(running) != 1 {
			t.Errorf("%d running pods of %s, want 1", len(running), s[1])
		}
		for _, pod := range running {
			checked++
			i := slices.IndexFunc(pod.Status.Conditions, func(c corev1.PodCondition) bool { return c.Type == corev1.PodReady })
			switch {
			case i < 0 || pod.Status.Conditions[i].Status != corev1.ConditionTrue:
				t.Errorf("pod %s is not Ready: %v", pod.Name, pod.Status.Conditions)
			case pod.Status.Conditions[i].LastTransitionTime.After(p.readyAt):
				t.Errorf("pod %s turned Ready again at %s, after every server was Ready (%s): it was not Ready in between",
					pod.Name, pod.Status.Conditions[i].LastTransitionTime.Format(time.TimeOnly), p.readyAt.Format(time.TimeOnly))
			}
			for _, cs := range append(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses...) {
				if cs.RestartCount != 0 {
					t.Errorf("pod %s: container %s restarted %d times", pod.Name, cs.Name, cs.RestartCount)
				}
			}
		}
	}
	t.Logf("%d server pods Ready since %s at the latest, no container restarted", checked, p.readyAt.Format(time.TimeOnly))
}
