package destination

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/plexus-mesh/plexus/mesh/api/balancerannotations"
	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// TestOutboundPolicyZoneAware: a proxy that names its node in its context
// token gets that node's zone in the policy of a zone-aware Service, and
// nothing for a Service that is not, for an unknown node, or without a
// node.
func TestOutboundPolicyZoneAware(t *testing.T) {
	node := func(name, zone string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
		if zone != "" {
			n.Labels[corev1.LabelTopologyZone] = zone
		}
		return n
	}
	aware := service("shop", "web", "10.96.0.10", svcPort("http", 80, intstr.FromInt32(8080)))
	aware.Annotations = map[string]string{balancerannotations.AnnotationZoneAware: "true"}
	plain := service("shop", "api", "10.96.0.11", svcPort("http", 80, intstr.FromInt32(8080)))
	client := fake.NewClientset(node("node-a", "zone-a"), node("node-nozone", ""), aware, plain)
	dst, _ := testServer(t, client, DefaultConfig())

	for _, tc := range []struct {
		name, path, token, want string
	}{
		{"zone-aware Service, known node", "web.shop.svc.cluster.local:80", `{"ns":"shop","nodeName":"node-a"}`, "zone-a"},
		{"by ClusterIP", "10.96.0.10:80", `{"ns":"shop","nodeName":"node-a"}`, "zone-a"},
		{"Service not zone-aware", "api.shop.svc.cluster.local:80", `{"ns":"shop","nodeName":"node-a"}`, ""},
		{"node without a zone", "web.shop.svc.cluster.local:80", `{"ns":"shop","nodeName":"node-nozone"}`, ""},
		{"unknown node", "web.shop.svc.cluster.local:80", `{"ns":"shop","nodeName":"node-x"}`, ""},
		{"no node", "web.shop.svc.cluster.local:80", `{"ns":"shop"}`, ""},
		{"garbage token", "web.shop.svc.cluster.local:80", `{"nodeName":`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, func(ctx context.Context, req *pb.GetDestination, opts ...grpc.CallOption) (grpc.ServerStreamingClient[pb.OutboundPolicy], error) {
				req.ContextToken = tc.token
				return dst.GetOutboundPolicy(ctx, req, opts...)
			}, tc.path)
			p := s.next(t, 5*time.Second)
			if p.GetParent().GetName() == "" {
				t.Fatalf("policy without a parent: %v", p)
			}
			if got := p.GetZoneAware().GetLocalZone(); got != tc.want || (tc.want == "") != (p.ZoneAware == nil) {
				t.Errorf("zone aware %v, want local zone %q", p.ZoneAware, tc.want)
			}
		})
	}
}
