package destination

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// propagation is how long a change may take to reach a stream (ARCHITECTURE.md
// §6: under 100 ms).
const propagation = 100 * time.Millisecond

// TestInboundPolicyFollowsChanges changes what an open stream's policy
// depends on, one thing at a time, and expects each change on the
// stream within propagation.
func TestInboundPolicyFollowsChanges(t *testing.T) {
	cfg := DefaultConfig()
	cfg.VerifyInboundCaller = false
	c := startCluster(t, clusterOptions{crds: true, inbound: true, cfg: &cfg}, namespaceObj("ns", nil), inboundPod(nil),
		server("web", "web", intstr.FromInt32(9090), "", 1),
		authzPolicy("ids", "Server/web", "MeshTLSAuthentication/a-only"), authzPolicy("open", "Server/web"))
	s := c.watchInbound(t, "ns", "web", 9090)
	expect := func(what string, change func(ctx context.Context) error, want string) {
		t.Helper()
		start := time.Now()
		if change != nil {
			if err := change(context.Background()); err != nil {
				t.Fatalf("%s: %v", what, err)
			}
		}
		got := inboundSummary(s.next(t, wait))
		took := time.Since(start)
		if change != nil && took > propagation {
			t.Errorf("%s reached the stream after %v, want under %v", what, took, propagation)
		}
		t.Logf("%s: on the stream after %v", what, took)
		if got != want {
			t.Fatalf("after %s\n got %s\nwant %s", what, got, want)
		}
	}
	policies := c.dyn.Resource(policyv1alpha1.AuthorizationPolicyResource).Namespace("ns")
	expect("opening", nil, "Server:ns/web unknown authz[AuthorizationPolicy:ns/open{}]")
	expect("creating the missing MeshTLSAuthentication", func(ctx context.Context) error {
		u, _ := policyObject(t, meshTLS("a-only", []string{idA}))
		_, err := c.dyn.Resource(policyv1alpha1.MeshTLSAuthenticationResource).Namespace("ns").Create(ctx, u, metav1.CreateOptions{})
		return err
	}, "Server:ns/web unknown authz[AuthorizationPolicy:ns/ids{mtls;ids="+idA+"} AuthorizationPolicy:ns/open{}]")
	expect("deleting an AuthorizationPolicy", func(ctx context.Context) error {
		return policies.Delete(ctx, "open", metav1.DeleteOptions{})
	}, "Server:ns/web unknown authz[AuthorizationPolicy:ns/ids{mtls;ids="+idA+"}]")
	expect("relabelling the pod away from the Server", func(ctx context.Context) error {
		p := inboundPod(nil)
		p.Labels["app"] = "other"
		_, err := c.core.CoreV1().Pods("ns").Update(ctx, p, metav1.UpdateOptions{})
		return err
	}, "default:all-unauthenticated unknown authz[default:all-unauthenticated{}]")
	expect("annotating the namespace", func(ctx context.Context) error {
		_, err := c.core.CoreV1().Namespaces().Update(ctx, namespaceObj("ns", map[string]string{AnnotationDefaultInboundPolicy: "deny"}), metav1.UpdateOptions{})
		return err
	}, "default:deny unknown authz[]")
}

// TestInboundPolicyCallerIdentity: only the pod's own proxy, proving its
// service account over TLS, gets the pod's policy.
func TestInboundPolicyCallerIdentity(t *testing.T) {
	mesh := newTestPKI(t, "cluster.local")
	serverCreds := mesh.serverCreds(t)
	as := func(sa string) credentials.TransportCredentials {
		if sa == "" {
			return presenting(nil)
		}
		cert := mesh.leaf(t, spiffe.New("cluster.local", "ns", sa))
		return presenting(&cert)
	}
	c := startCluster(t, clusterOptions{crds: true, inbound: true, serverCreds: serverCreds, clientCreds: as("web")}, inboundPod(nil))

	for _, tc := range []struct {
		name     string
		client   pb.DestinationClient
		req      *pb.InboundPolicyRequest
		code     codes.Code
		contains string
	}{
		{"its own proxy", c.dst, &pb.InboundPolicyRequest{Namespace: "ns", Pod: "web", Port: 8080}, codes.OK, ""},
		// Another service account's pod, and a pod that does not exist, get
		// the same answer: a proxy learns nothing of other pods by asking.
		{"another service account", c.dial(as("a")), &pb.InboundPolicyRequest{Namespace: "ns", Pod: "web", Port: 8080}, codes.PermissionDenied,
			"the inbound policy of pod ns/web is for that pod's own proxy only, and the caller spiffe://cluster.local/ns/ns/sa/a is not the identity of a pod of that name that destination knows"},
		{"unknown pod", c.dst, &pb.InboundPolicyRequest{Namespace: "ns", Pod: "gone", Port: 8080}, codes.PermissionDenied,
			"the inbound policy of pod ns/gone is for that pod's own proxy only, and the caller spiffe://cluster.local/ns/ns/sa/web is not the identity of a pod of that name that destination knows"},
		{"another namespace's pod", c.dst, &pb.InboundPolicyRequest{Namespace: "other", Pod: "web", Port: 8080}, codes.PermissionDenied, "is not the identity of a pod of that name"},
		{"no client certificate", c.dial(as("")), &pb.InboundPolicyRequest{Namespace: "ns", Pod: "web", Port: 8080}, codes.PermissionDenied, "no verified TLS client certificate"},
		{"no port", c.dst, &pb.InboundPolicyRequest{Namespace: "ns", Pod: "web"}, codes.InvalidArgument, "port"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), wait)
			defer cancel()
			st, err := tc.client.GetInboundPolicy(ctx, tc.req)
			if err == nil {
				_, err = st.Recv()
			}
			if got := status.Code(err); got != tc.code || !strings.Contains(status.Convert(err).Message(), tc.contains) {
				t.Errorf("got %v, want %v with %q", err, tc.code, tc.contains)
			}
		})
	}
	if got := metricValue(t, c.reg, refusedMetric, reasonNotOwnPod, rpcGetInboundPolicy); got != 3 {
		t.Errorf("%s{reason=%s} = %v, want 3", refusedMetric, reasonNotOwnPod, got)
	}
}

// TestInboundPolicyUnwatched: a server that does not watch inbound
// policies says so.
func TestInboundPolicyUnwatched(t *testing.T) {
	c := startCluster(t, clusterOptions{crds: true, clientCreds: insecure.NewCredentials()}, inboundPod(nil))
	st, err := c.dst.GetInboundPolicy(context.Background(), &pb.InboundPolicyRequest{Namespace: "ns", Pod: "web", Port: 80})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.Unimplemented {
		t.Errorf("got %v, want Unimplemented", err)
	}
}
