package authzreport

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/control/cli/stat"
	"github.com/plexus-mesh/plexus/control/destination"
	"github.com/plexus-mesh/plexus/control/inboundpolicy"
	"github.com/plexus-mesh/plexus/control/inboundpolicy/inboundpolicytest"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const cpNamespace = "plexus-system"

func meta(ns, name string, age time.Duration) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name, CreationTimestamp: metav1.NewTime(time.Unix(1_800_000_000, 0).Add(-age))}
}

// podSpec: container app with ports http 8080 and metrics 9090 (and a
// UDP port), a readiness probe GET /ready on http; meshed adds the proxy
// with its own ports.
func podSpec(meshed bool) corev1.PodSpec {
	s := corev1.PodSpec{ServiceAccountName: "web", Containers: []corev1.Container{{Name: "app",
		Ports:          []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "metrics", ContainerPort: 9090}, {Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}},
		ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/ready", Port: intstr.FromString("http")}}},
	}}}
	if meshed {
		always := corev1.ContainerRestartPolicyAlways
		s.InitContainers = []corev1.Container{{Name: meshpod.ProxyContainerName, RestartPolicy: &always,
			Ports: []corev1.ContainerPort{{Name: "plexus-inbound", ContainerPort: 4143}, {Name: "plexus-admin", ContainerPort: 4191}}}}
	}
	return s
}

func pod(name string, labels map[string]string, age time.Duration, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: func() metav1.ObjectMeta { m := meta("shop", name, age); m.Labels = labels; return m }(),
		Spec: podSpec(true), Status: corev1.PodStatus{Phase: phase, PodIP: "10.1.0.9"}}
}

func selector(app string) (*metav1.LabelSelector, map[string]string) {
	l := map[string]string{"app": app}
	return &metav1.LabelSelector{MatchLabels: l}, l
}

// shop is a namespace with workloads web (deployment, three pods: one
// finished, an older and a newer running one), db (statefulset without
// pods, unmeshed template), agent (daemonset), and policies: Server web
// on port http of app=web (accessPolicy deny), authorized for sa a by
// MeshTLS and for the pod network by a NetworkAuthentication; HTTPRoute
// admin (POST /admin) for sa b, and in dry run for sa c; a rate limit.
func shop(t *testing.T, extra ...any) inboundpolicy.Clients {
	webSel, webLabels := selector("web")
	dbSel, dbLabels := selector("db")
	agentSel, agentLabels := selector("agent")
	dry := authzPolicy("dry-c", "HTTPRoute", "admin", "ServiceAccount/c")
	dry.Annotations = map[string]string{destination.AnnotationDryRun: "true"}
	objs := []any{
		&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "shop"}},
		&appsv1.Deployment{ObjectMeta: meta("shop", "web", 0), Spec: appsv1.DeploymentSpec{Selector: webSel, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: webLabels}, Spec: podSpec(false)}}},
		pod("web-done", webLabels, time.Minute, corev1.PodSucceeded),
		pod("web-old", webLabels, time.Hour, corev1.PodRunning),
		pod("web-new", webLabels, 2*time.Minute, corev1.PodRunning),
		pod("other", map[string]string{"app": "other"}, 0, corev1.PodRunning),
		&appsv1.StatefulSet{ObjectMeta: meta("shop", "db", 0), Spec: appsv1.StatefulSetSpec{Selector: dbSel, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: dbLabels, Annotations: map[string]string{destination.AnnotationDefaultInboundPolicy: "all-authenticated"}}, Spec: podSpec(false)}}},
		&appsv1.DaemonSet{ObjectMeta: meta("shop", "agent", 0), Spec: appsv1.DaemonSetSpec{Selector: agentSel, Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: agentLabels}, Spec: podSpec(true)}}},
		pod("agent-x", agentLabels, 0, corev1.PodRunning),
		&policyv1alpha1.Server{ObjectMeta: meta("shop", "web", 0), Spec: policyv1alpha1.ServerSpec{PodSelector: *webSel, Port: intstr.FromString("http"), ProxyProtocol: policyv1alpha1.ProtocolHTTP1}},
		authzPolicy("for-a", "Server", "web", "MeshTLSAuthentication/a-only"),
		authzPolicy("pod-network", "Server", "web", "NetworkAuthentication/pods"),
		dry,
		&policyv1alpha1.MeshTLSAuthentication{ObjectMeta: meta("shop", "a-only", 0), Spec: policyv1alpha1.MeshTLSAuthenticationSpec{
			IdentityRefs: []policyv1alpha1.IdentityRef{{Kind: policyv1alpha1.ServiceAccountKind, Name: "a"}}}},
		&policyv1alpha1.NetworkAuthentication{ObjectMeta: meta("shop", "pods", 0), Spec: policyv1alpha1.NetworkAuthenticationSpec{
			Networks: []policyv1alpha1.Network{{CIDR: "10.1.0.0/16", Except: []string{"10.1.99.0/24"}}}}},
		route("admin", "web", "POST", "/admin"),
		authzPolicy("admins", "HTTPRoute", "admin", "ServiceAccount/b"),
		&policyv1alpha1.HTTPLocalRateLimitPolicy{ObjectMeta: meta("shop", "limit", 0), Spec: policyv1alpha1.HTTPLocalRateLimitPolicySpec{
			TargetRef: policyv1alpha1.TargetRef{Group: policyv1alpha1.Group, Kind: policyv1alpha1.ServerKind, Name: "web"},
			Total:     &policyv1alpha1.Limit{RequestsPerSecond: 100}, Identity: &policyv1alpha1.Limit{RequestsPerSecond: 20},
			Overrides: []policyv1alpha1.Override{{RequestsPerSecond: 50, ClientRefs: []policyv1alpha1.IdentityRef{{Kind: policyv1alpha1.ServiceAccountKind, Name: "b"}}}},
		}},
	}
	return inboundpolicytest.New(t, append(objs, extra...)...).Clients()
}

// authzPolicy targets kind/name (Server, HTTPRoute) requiring refs
// "Kind/name".
func authzPolicy(name, kind, target string, refs ...string) *policyv1alpha1.AuthorizationPolicy {
	groups := map[string]string{"Server": policyv1alpha1.Group, "HTTPRoute": policyv1alpha1.GatewayGroup,
		"MeshTLSAuthentication": policyv1alpha1.Group, "NetworkAuthentication": policyv1alpha1.Group}
	ap := &policyv1alpha1.AuthorizationPolicy{ObjectMeta: meta("shop", name, 0), Spec: policyv1alpha1.AuthorizationPolicySpec{
		TargetRef: policyv1alpha1.TargetRef{Group: groups[kind], Kind: kind, Name: target}, RequiredAuthenticationRefs: []policyv1alpha1.NamespacedTargetRef{}}}
	for _, r := range refs {
		k, n, _ := strings.Cut(r, "/")
		ap.Spec.RequiredAuthenticationRefs = append(ap.Spec.RequiredAuthenticationRefs, policyv1alpha1.NamespacedTargetRef{Group: groups[k], Kind: k, Name: n})
	}
	return ap
}

func ptr[T any](v T) *T { return &v }

// route is an HTTPRoute whose parent is Server srv, matching method and
// the exact path.
func route(name, srv, method, path string) *gatewayv1.HTTPRoute {
	return &gatewayv1.HTTPRoute{ObjectMeta: meta("shop", name, 0), Spec: gatewayv1.HTTPRouteSpec{
		CommonRouteSpec: gatewayv1.CommonRouteSpec{ParentRefs: []gatewayv1.ParentReference{{
			Group: ptr(gatewayv1.Group(policyv1alpha1.Group)), Kind: ptr(gatewayv1.Kind(policyv1alpha1.ServerKind)), Name: gatewayv1.ObjectName(srv)}}},
		Rules: []gatewayv1.HTTPRouteRule{{Matches: []gatewayv1.HTTPRouteMatch{{
			Path: &gatewayv1.HTTPPathMatch{Type: ptr(gatewayv1.PathMatchExact), Value: &path}, Method: ptr(gatewayv1.HTTPMethod(method))}}}},
	}}
}

func destinationWith(args ...string) *appsv1.Deployment {
	return inboundpolicytest.Destination(cpNamespace, corev1.Container{Name: "destination", Args: append([]string{"destination"}, args...)})
}

// rows summarises a report: the pod, then per port its policy and one
// line per authorization (route, ref, networks, identities, dry run).
func rows(r *Report) []string {
	out := []string{fmt.Sprintf("pod=%q template=%v", r.Pod, r.PodTemplate)}
	for _, p := range r.Ports {
		head := fmt.Sprintf("%d %s %s", p.Port, p.Server, p.Protocol)
		if p.Audit {
			head += " audit"
		}
		out = append(out, head)
		line := func(route string, a Authorization) {
			s := fmt.Sprintf("  %s: %s nets=%v mtls=%v ids=%v", route, a.Ref, a.Networks, a.MeshTLS, a.Identities)
			if a.DryRun {
				s += " dry"
			}
			out = append(out, s)
		}
		for _, a := range p.Authorizations {
			line("port", a)
		}
		for _, rt := range p.Routes {
			out = append(out, fmt.Sprintf("  route %s %v", rt.Ref, rt.Matches))
			for _, a := range rt.Authorizations {
				line(rt.Ref.Name, a)
			}
		}
		if p.RateLimit != nil {
			out = append(out, fmt.Sprintf("  limit %d/%d %v", p.RateLimit.TotalPerSecond, p.RateLimit.IdentityPerSecond, p.RateLimit.Overrides))
		}
	}
	return out
}

func TestPolicies(t *testing.T) {
	const (
		idA = "spiffe://cluster.local/ns/shop/sa/a"
		idB = "spiffe://cluster.local/ns/shop/sa/b"
		idC = "spiffe://cluster.local/ns/shop/sa/c"
	)
	web8080 := []string{
		"8080 Server shop/web HTTP/1",
		"  port: AuthorizationPolicy shop/for-a nets=[] mtls=true ids=[" + idA + "]",
		"  port: AuthorizationPolicy shop/pod-network nets=[10.1.0.0/16 except 10.1.99.0/24] mtls=false ids=[]",
		"  route HTTPRoute shop/admin [POST /admin]",
		"  admin: AuthorizationPolicy shop/admins nets=[] mtls=true ids=[" + idB + "]",
		"  admin: AuthorizationPolicy shop/dry-c nets=[] mtls=true ids=[" + idC + "] dry",
		"  route default probe [GET /ready]",
		"  probe: default probe nets=[] mtls=false ids=[]",
		"  limit 100/20 [{50 [" + idB + "]}]",
	}
	for _, tc := range []struct {
		name  string
		cfg   Config
		extra []any
		want  []string
		notes []string
		err   string
	}{
		{name: "deployment: its newest running pod, every declared TCP port", cfg: Config{Kind: Deployment, Name: "web"},
			want:  append(append([]string{`pod="web-new" template=false`}, web8080...), "9090 default all-unauthenticated unknown", "  port: default all-unauthenticated nets=[] mtls=false ids=[]"),
			notes: []string{}},
		{name: "pod by name", cfg: Config{Kind: Pod, Name: "web-old", Port: 8080},
			want: append([]string{`pod="web-old" template=false`}, web8080...)},
		{name: "statefulset without pods: its template", cfg: Config{Kind: StatefulSet, Name: "db", Port: 9090},
			want:  []string{`pod="" template=true`, "9090 default all-authenticated unknown", "  port: default all-authenticated nets=[] mtls=true ids=[]"},
			notes: []string{"statefulset/db has no pod: computed for its pod template (a pod's annotations and labels may differ once admitted)"}},
		{name: "daemonset, destination's default policy and networks from its args", cfg: Config{Kind: DaemonSet, Name: "agent", Port: 9090},
			extra: []any{destinationWith("--default-inbound-policy=cluster-unauthenticated", "--cluster-networks=10.0.0.0/8")},
			want:  []string{`pod="agent-x" template=false`, "9090 default cluster-unauthenticated unknown", "  port: default cluster-unauthenticated nets=[10.0.0.0/8] mtls=false ids=[]"}},
		{name: "undeclared port", cfg: Config{Kind: Deployment, Name: "web", Port: 7000},
			extra: []any{destinationWith("--default-inbound-policy=deny")},
			want:  []string{`pod="web-new" template=false`, "7000 default deny unknown"}},
		{name: "what destination logs comes as notes", cfg: Config{Kind: Deployment, Name: "web", Port: 8080},
			extra: []any{authzPolicy("ghost", "Server", "web", "MeshTLSAuthentication/absent")},
			want:  append([]string{`pod="web-new" template=false`}, web8080...),
			notes: []string{`AuthorizationPolicy authorizes nobody: a required authentication does not exist policy=shop/ghost missing="MeshTLSAuthentication shop/absent"`}},
		{name: "not found", cfg: Config{Kind: Deployment, Name: "nope"}, err: `deployment shop/nope: deployments.apps "nope" not found`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Namespace, tc.cfg.ControlPlaneNamespace = "shop", cpNamespace
			r, err := Authz{Clients: shop(t, tc.extra...)}.Run(context.Background(), tc.cfg)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("error %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(rows(r), "\n"); got != strings.Join(tc.want, "\n") {
				t.Errorf("rows\n%s\nwant\n%s", got, strings.Join(tc.want, "\n"))
			}
			if tc.notes != nil && strings.Join(r.Notes, "\n") != strings.Join(tc.notes, "\n") {
				t.Errorf("notes\n%s\nwant\n%s", strings.Join(r.Notes, "\n"), strings.Join(tc.notes, "\n"))
			}
		})
	}
}

// TestFrom evaluates a client on every port.
func TestFrom(t *testing.T) {
	for _, tc := range []struct {
		name       string
		from, addr string
		want       []string // connection on 8080, request on admin, on the probe route, rate limit; connection on 9090
	}{
		{name: "allowed by its MeshTLS authentication", from: "sa/a", want: []string{
			"allowed by AuthorizationPolicy shop/for-a",
			"allowed by AuthorizationPolicy shop/for-a",
			"allowed by default probe",
			"20/s (the per-identity share), 100/s for all clients together, none on the probe route",
			"allowed by default all-unauthenticated",
		}},
		{name: "route's authorization; port's network as a condition", from: "sa/b", want: []string{
			"from 10.1.0.0/16 except 10.1.99.0/24: allowed by AuthorizationPolicy shop/pod-network; otherwise denied",
			"allowed by AuthorizationPolicy shop/admins",
			"allowed by default probe",
			"50/s (its override), 100/s for all clients together, none on the probe route",
			"allowed by default all-unauthenticated",
		}},
		{name: "address outside the network: denied", from: "sa/b", addr: "192.168.1.1", want: []string{
			"denied",
			"allowed by AuthorizationPolicy shop/admins",
			"allowed by default probe",
			"50/s (its override), 100/s for all clients together, none on the probe route",
			"allowed by default all-unauthenticated",
		}},
		{name: "address inside the network", from: "unauthenticated", addr: "10.1.2.3", want: []string{
			"allowed by AuthorizationPolicy shop/pod-network",
			"allowed by AuthorizationPolicy shop/pod-network",
			"allowed by default probe",
			"20/s (the per-identity share, for all plaintext clients together), 100/s for all clients together, none on the probe route",
			"allowed by default all-unauthenticated",
		}},
		{name: "dry run on the route only", from: "spiffe://cluster.local/ns/shop/sa/c", addr: "192.168.1.1", want: []string{
			"denied",
			"let through, reported as allowed by the dry-run AuthorizationPolicy shop/dry-c",
			"allowed by default probe",
			"20/s (the per-identity share), 100/s for all clients together, none on the probe route",
			"allowed by default all-unauthenticated",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			from, err := ParseFrom(tc.from, "shop")
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Kind: Deployment, Name: "web", Namespace: "shop", ControlPlaneNamespace: cpNamespace, From: from}
			if tc.addr != "" {
				cfg.FromAddr = netip.MustParseAddr(tc.addr)
			}
			r, err := Authz{Clients: shop(t)}.Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			a, b := r.Ports[0].Access, r.Ports[1].Access
			got := []string{verdictsText(a.Connection), verdictsText(a.Routes[0].Verdicts), verdictsText(a.Routes[1].Verdicts), a.RateLimit, verdictsText(b.Connection)}
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("access\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestParse(t *testing.T) {
	for _, args := range [][]string{{"deploy/web"}, {"deployment", "web"}, {"Deployments/web"}} {
		if k, n, err := ParseTarget(args); k != Deployment || n != "web" || err != nil {
			t.Errorf("ParseTarget(%q) = %s, %s, %v", args, k, n, err)
		}
	}
	for _, args := range [][]string{{"svc/web"}, {"deploy"}, {"deploy/web", "x"}, {"deploy/"}, {"deploy", "a/b"}} {
		if _, _, err := ParseTarget(args); err == nil {
			t.Errorf("ParseTarget(%q) accepted", args)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"sa/a", "spiffe://td/ns/shop/sa/a sa shop/a"},
		{"serviceaccount/a", "spiffe://td/ns/shop/sa/a sa shop/a"},
		{"spiffe://other/ns/x/sa/y", "spiffe://other/ns/x/sa/y spiffe://other/ns/x/sa/y"},
		{"unauthenticated", " unauthenticated"},
	} {
		f, err := ParseFrom(tc.in, "shop")
		if err != nil {
			t.Errorf("ParseFrom(%q): %v", tc.in, err)
			continue
		}
		if id, name := f.identity("td"); id+" "+name != tc.want {
			t.Errorf("ParseFrom(%q) = %s %s, want %s", tc.in, id, name, tc.want)
		}
	}
	for _, bad := range []string{"a", "deploy/a", "sa/", "sa/a/b", "spiffe://x"} {
		if _, err := ParseFrom(bad, "shop"); err == nil {
			t.Errorf("ParseFrom(%q) accepted", bad)
		}
	}
}

// TestRender: the table and JSON of deploy/web for sa b, as golden files.
func TestRender(t *testing.T) {
	from, err := ParseFrom("sa/b", "shop")
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Kind: Deployment, Name: "web", Namespace: "shop", ControlPlaneNamespace: cpNamespace, From: from}
	r, err := Authz{Clients: shop(t, destinationWith("--trust-domain=cluster.local"), authzPolicy("ghost", "Server", "web", "MeshTLSAuthentication/absent"))}.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"table", stat.FormatJSON} {
		golden(t, "deploy-web-from-b."+format, r, format)
	}
	tmpl, err := Authz{Clients: shop(t)}.Run(context.Background(), Config{Kind: StatefulSet, Name: "db", Namespace: "shop", ControlPlaneNamespace: cpNamespace})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "sts-db.table", tmpl, "table")
	if err := Render(&bytes.Buffer{}, r, "xml"); err == nil {
		t.Error("output xml accepted")
	}
}

func golden(t *testing.T, name string, r *Report, format string) {
	t.Helper()
	if format == "table" {
		format = stat.FormatTable
	}
	var out bytes.Buffer
	if err := Render(&out, r, format); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if !bytes.Equal(out.Bytes(), want) {
		t.Errorf("%s differs (go test -update rewrites it); got:\n%s", path, out.String())
	}
}
