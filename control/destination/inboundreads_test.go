package destination

import (
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
)

// computeFromObjects runs ComputeInboundPolicy for pod ns/web of objs, as
// a client that listed them would (without the policy CRDs: none of
// their objects).
func computeFromObjects(t *testing.T, cfg Config, crds bool, objs []any, port uint16) *pb.InboundPolicy {
	t.Helper()
	var listed []any
	var pod *corev1.Pod
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Pod:
			pod = o
			continue
		case *policyv1alpha1.Server, *policyv1alpha1.AuthorizationPolicy, *policyv1alpha1.MeshTLSAuthentication,
			*policyv1alpha1.NetworkAuthentication, *policyv1alpha1.HTTPLocalRateLimitPolicy:
			if !crds {
				continue
			}
		}
		listed = append(listed, o)
	}
	reads, err := NewInboundObjects(listed...)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ComputeInboundPolicy(reads, cfg, pod, port)
	if p == nil {
		t.Fatalf("ComputeInboundPolicy: no policy: %v", err)
	}
	return p
}

// TestComputeInboundPolicyWarnings: what destination logs comes back as
// the error, each once, beside the policy it sends.
func TestComputeInboundPolicyWarnings(t *testing.T) {
	srv := server("web", "web", intstr.FromInt32(9090), "", 10)
	twice := routeToServer("twice", "web", "GET", "/x")
	twice.Spec.ParentRefs = append(twice.Spec.ParentRefs, twice.Spec.ParentRefs[0])
	twice.Spec.ParentRefs[1].Port = ptr(gatewayv1.PortNumber(9090))
	reads, err := NewInboundObjects(srv, server("newer", "web", intstr.FromInt32(9090), "", 1),
		authzPolicy("ghost", "Server/web", "MeshTLSAuthentication/absent"), authzPolicy("ghost2", "HTTPRoute/twice", "MeshTLSAuthentication/absent"), twice)
	if err != nil {
		t.Fatal(err)
	}
	p, err := ComputeInboundPolicy(reads, DefaultConfig(), inboundPod(map[string]string{AnnotationDefaultInboundPolicy: "bogus"}), 9090)
	if got, want := inboundSummary(p), "Server:ns/web unknown authz[] routes[HTTPRoute:ns/twice (GET =/x) authz[]]"; got != want {
		t.Errorf("policy\n got %s\nwant %s", got, want)
	}
	if err == nil {
		t.Fatal("no warnings")
	}
	lines := strings.Split(err.Error(), "\n")
	for _, want := range []string{
		`several Servers select the same pod port: the oldest applies namespace=ns servers=web,newer port=9090 applies=web`,
		`AuthorizationPolicy authorizes nobody: a required authentication does not exist policy=ns/ghost missing="MeshTLSAuthentication ns/absent"`,
		`AuthorizationPolicy authorizes nobody: a required authentication does not exist policy=ns/ghost2 missing="MeshTLSAuthentication ns/absent"`,
	} {
		if strings.Count(err.Error(), want) != 1 {
			t.Errorf("warnings\n%s\nwant once: %s", err, want)
		}
	}
	if len(lines) != 3 {
		t.Errorf("%d warnings, want 3 (a Server's pod annotation is not read):\n%s", len(lines), err)
	}
	if got := reads.ServerHTTPRoutes("ns/web"); len(got) != 1 {
		t.Errorf("a route naming its Server twice is read %d times, want once", len(got))
	}
}

func TestComputeInboundPolicyRefuses(t *testing.T) {
	reads, err := NewInboundObjects()
	if err != nil {
		t.Fatal(err)
	}
	bad := DefaultConfig()
	bad.DefaultInboundPolicy = "open"
	bad.ClusterNetworks = []netip.Prefix{netip.MustParsePrefix("10.1.2.3/8")}
	for name, tc := range map[string]struct {
		cfg  Config
		pod  *corev1.Pod
		port uint16
	}{
		"bad config": {bad, inboundPod(nil), 8080},
		"no pod":     {DefaultConfig(), nil, 8080},
		"no port":    {DefaultConfig(), inboundPod(nil), 0},
	} {
		if p, err := ComputeInboundPolicy(reads, tc.cfg, tc.pod, tc.port); p != nil || err == nil {
			t.Errorf("%s: policy %v, error %v; want no policy and an error", name, p, err)
		}
	}
	if _, err := NewInboundObjects(inboundPod(nil)); err == nil {
		t.Error("NewInboundObjects took a pod")
	}
}
