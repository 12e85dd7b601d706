package proxy

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/policy/authz"
	"github.com/plexus-mesh/plexus/sidecar/metrics"
)

// The admin and probe ports obey the inbound policy: before one arrives
// only the probe paths are answered; with a deny policy the node still
// reaches the probe paths its probe route names, and nothing else.
func TestAdminObeysPolicy(t *testing.T) {
	pols := &fixedPolicies{by: map[uint16]*authz.Policy{}}
	h := authorizeAdmin(pols, 4191, true, metrics.New(prometheus.NewRegistry(), 10),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	get := func(path, from string) int {
		r := httptest.NewRequest("GET", path, nil)
		r.RemoteAddr = from + ":40000"
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	const node, pod = "192.168.1.10", "10.244.0.7"
	for path, want := range map[string]int{"/ready": 200, "/live": 200, "/metrics": 403} {
		if got := get(path, pod); got != want {
			t.Errorf("no policy yet: %s = %d, want %d", path, got, want)
		}
	}
	probe := &pb.InboundRoute{Ref: &pb.ResourceRef{Kind: "default", Name: "probe"},
		Matches:        []*pb.RouteMatch{{Method: "GET", Path: &pb.PathMatch{Kind: pb.PathMatch_EXACT, Value: "/live"}}},
		Authorizations: []*pb.Authorization{{Ref: &pb.ResourceRef{Kind: "default", Name: "probe"}, Networks: []*pb.Network{{Cidr: node + "/32"}}}}}
	catchAll := &pb.InboundRoute{Ref: &pb.ResourceRef{Kind: "default", Name: "default"}}
	pols.set(t, 4191, &pb.InboundPolicy{Server: &pb.ResourceRef{Kind: "default", Name: "deny"}, Routes: []*pb.InboundRoute{probe, catchAll}})
	for _, c := range []struct {
		path, from string
		want       int
	}{{"/live", node, 200}, {"/live", pod, 403}, {"/metrics", node, 403}, {"/metrics", pod, 403}} {
		if got := get(c.path, c.from); got != c.want {
			t.Errorf("deny with a probe route: %s from %s = %d, want %d", c.path, c.from, got, c.want)
		}
	}
	// An operator's port-forward (the pod's loopback) reads the metrics
	// under deny; the probe port never lets loopback in by itself.
	for _, from := range []string{"127.0.0.1", "[::1]"} {
		if got := get("/metrics", from); got != 200 {
			t.Errorf("deny: /metrics from %s = %d, want 200 (loopback)", from, got)
		}
	}
	probePort := authorizeAdmin(pols, 4191, false, metrics.New(prometheus.NewRegistry(), 10),
		http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(200) }))
	r := httptest.NewRequest("GET", "/metrics", nil)
	r.RemoteAddr = "127.0.0.1:40000"
	w := httptest.NewRecorder()
	if probePort.ServeHTTP(w, r); w.Code != 403 {
		t.Errorf("deny, loopback not let in: /metrics from 127.0.0.1 = %d, want 403", w.Code)
	}
	pols.set(t, 4191, policyOf("all-unauthenticated", allUnauthenticated))
	if got := get("/metrics", pod); got != 200 {
		t.Errorf("all-unauthenticated: /metrics = %d, want 200", got)
	}
}
