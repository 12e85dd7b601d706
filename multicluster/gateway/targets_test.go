package gateway

import (
	"context"
	"net/netip"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

func svc(name, exported string) *corev1.Service {
	s := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name}}
	if exported != "" {
		s.Labels = map[string]string{mc.ExportedLabel: exported}
	}
	return s
}

func pod(name, ip string, meshed bool) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
		Spec:   corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Env: []corev1.EnvVar{{Name: "SECRET", Value: "x"}}}}},
		Status: corev1.PodStatus{PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}}
	if meshed {
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: meshpod.ProxyContainerName})
	}
	return p
}

func slice(service, ip, podName string, port int32) *discoveryv1.EndpointSlice {
	return &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Namespace: "shop", Name: service + "-" + podName, Labels: map[string]string{discoveryv1.LabelServiceName: service}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "shop", Name: podName}}},
		Ports:       []discoveryv1.EndpointPort{{Port: &port}},
	}
}

// TestTargetsAllowOnlyMeshedEndpointsOfGatewayExports: the gateway may
// reach a meshed pod of a Service exported in gateway mode, at its own
// address and the port its EndpointSlice names; not another port, not a
// pod without the proxy or whose proxy skips the port or some sources,
// not a pod of a Service exported flat or not at all, not an address no
// slice names, nor one a slice lends a meshed pod's name.
func TestTargetsAllowOnlyMeshedEndpointsOfGatewayExports(t *testing.T) {
	skipsPort, skipsSources := pod("skip-1", "10.245.0.20", true), pod("skip-2", "10.245.0.21", true)
	skipsPort.Annotations = map[string]string{podcontract.AnnotationSkipInboundPorts: "8080"}
	skipsSources.Annotations = map[string]string{podcontract.AnnotationSkipInboundSubnets: "10.0.0.0/8"}
	client := fake.NewClientset(
		svc("web", mc.ExportedGateway), svc("flat", mc.ExportedRemoteDiscovery), svc("private", ""), svc("mixed", mc.ExportedGateway),
		svc("forged", mc.ExportedGateway), svc("skips", mc.ExportedGateway),
		pod("web-1", "10.245.0.5", true), pod("flat-1", "10.245.0.6", true), pod("private-1", "10.245.0.7", true), pod("plain-1", "10.245.0.8", false),
		skipsPort, skipsSources,
		slice("web", "10.245.0.5", "web-1", 8080), slice("flat", "10.245.0.6", "flat-1", 8080),
		slice("private", "10.245.0.7", "private-1", 8080), slice("mixed", "10.245.0.8", "plain-1", 8080),
		// A hand-written slice lending web-1's name to the node's kubelet.
		slice("forged", "10.214.0.1", "web-1", 10250),
		slice("skips", "10.245.0.20", "skip-1", 8080), slice("skips", "10.245.0.21", "skip-2", 8080),
	)
	targets, err := NewTargets(client)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = targets.Run(ctx) }()
	eventually.Within(t, wait, "caches synced", func() bool { return targets.Ready() == nil })

	for dst, want := range map[string]bool{
		"10.245.0.5:8080":  true,
		"10.245.0.5:9090":  false, // a port the Service does not offer
		"10.245.0.6:8080":  false, // exported flat
		"10.245.0.7:8080":  false, // not exported
		"10.245.0.8:8080":  false, // exported, but the pod has no proxy
		"10.96.0.1:443":    false, // no endpoint at all (the API server's Service)
		"10.214.0.1:10250": false, // a slice naming a meshed pod that does not have the address
		"10.245.0.20:8080": false, // its proxy skips the port
		"10.245.0.21:8080": false, // its proxy skips some sources
	} {
		err := targets.Allowed(netip.MustParseAddrPort(dst))
		if (err == nil) != want {
			t.Errorf("Allowed(%s) = %v, want allowed %v", dst, err, want)
		}
	}
	// Un-exporting withdraws it.
	if _, err := client.CoreV1().Services("shop").Update(ctx, svc("web", ""), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually.Within(t, wait, "web no longer a target", func() bool {
		return targets.Allowed(netip.MustParseAddrPort("10.245.0.5:8080")) != nil
	})
	// The cached pods keep no more than the proxy test reads.
	p, err := targets.pods.Pods("shop").Get("web-1")
	if err != nil || len(p.Spec.Containers[0].Env) != 0 {
		t.Errorf("cached pod %+v, %v: want it trimmed", p, err)
	}
}

const wait = 5 * time.Second
