package destination

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/meshpod"
	"github.com/plexus-mesh/plexus/testsupport/eventually"
)

// testServer runs a Server for client on a loopback gRPC listener until the
// test ends, and returns a client of it and the metrics registry.
func testServer(t testing.TB, client kubernetes.Interface, cfg Config) (pb.DestinationClient, *prometheus.Registry) {
	t.Helper()
	return testServerWith(t, client, cfg, nil)
}

// testServerWith is testServer, calling setup (when not nil) with the
// Server before it runs.
func testServerWith(t testing.TB, client kubernetes.Interface, cfg Config, setup func(*Server)) (pb.DestinationClient, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(testWriter{t}, nil))
	}
	srv, err := New(cfg, client, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		setup(srv)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	eventually.Within(t, 30*time.Second, "the informers' sync", func() bool { return srv.Ready() == nil })
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	pb.RegisterDestinationServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		conn.Close()
		gs.Stop()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return pb.NewDestinationClient(conn), reg
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) { w.t.Log(string(p)); return len(p), nil }

// recvStream reads a server stream in the background so tests can wait
// with a timeout.
type recvStream[T any] struct {
	msgs chan T
	err  chan error
}

func open[T any](t testing.TB, call func(context.Context, *pb.GetDestination, ...grpc.CallOption) (grpc.ServerStreamingClient[T], error), path string) *recvStream[*T] {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := call(ctx, &pb.GetDestination{Path: path})
	if err != nil {
		t.Fatalf("opening stream for %s: %v", path, err)
	}
	r := &recvStream[*T]{msgs: make(chan *T, 10000), err: make(chan error, 1)}
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				r.err <- err
				return
			}
			r.msgs <- m
		}
	}()
	return r
}

// next returns the next message, failing the test after timeout.
func (r *recvStream[T]) next(t testing.TB, timeout time.Duration) T {
	t.Helper()
	select {
	case m := <-r.msgs:
		return m
	case err := <-r.err:
		t.Fatalf("stream ended: %v", err)
	case <-time.After(timeout):
		t.Fatalf("no message within %v", timeout)
	}
	var zero T
	return zero
}

// expect reads len(want) updates and compares them (see describe).
func (r *recvStream[T]) expectUpdates(t testing.TB, timeout time.Duration, want ...string) []*pb.Update {
	t.Helper()
	var got []*pb.Update
	var text []string
	for range want {
		u := any(r.next(t, timeout)).(*pb.Update)
		got = append(got, u)
		text = append(text, describe(u)...)
	}
	if !equalStrings(text, want) {
		t.Fatalf("updates %v, want %v", text, want)
	}
	return got
}

// quiet fails if a message arrives within d.
func (r *recvStream[T]) quiet(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case m := <-r.msgs:
		t.Fatalf("unexpected message %v", m)
	case <-time.After(d):
	}
}

// Object builders.

func service(ns, name, clusterIP string, ports ...corev1.ServicePort) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Ports: ports, Type: corev1.ServiceTypeClusterIP},
	}
	if clusterIP != "" {
		svc.Spec.ClusterIP = clusterIP
		svc.Spec.ClusterIPs = []string{clusterIP}
	}
	return svc
}

func svcPort(name string, port int32, target intstr.IntOrString) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: target, Protocol: corev1.ProtocolTCP}
}

// sliceEndpoint is one endpoint of a test slice: an address, readiness and
// optionally the pod behind it.
type sliceEndpoint struct {
	ip    string
	ready bool
	pod   string
}

func endpointSlice(ns, name, svc string, family discoveryv1.AddressType, portName string, port int32, eps ...sliceEndpoint) *discoveryv1.EndpointSlice {
	tcp := corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{
			discoveryv1.LabelServiceName: svc,
			discoveryv1.LabelManagedBy:   "plexus-test",
		}},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &tcp}},
	}
	for _, e := range eps {
		ready := e.ready
		ep := discoveryv1.Endpoint{Addresses: []string{e.ip}, Conditions: discoveryv1.EndpointConditions{Ready: &ready}}
		if e.pod != "" {
			ep.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: e.pod}
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	return s
}

// pod returns a pod with IP ip (status), meshed or not; it never runs
// anywhere (its node selector matches no node).
func pod(ns, name, ip string, meshed bool, annotations map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			ServiceAccountName: "web",
			NodeSelector:       map[string]string{"plexus.dev/no-such-node": "true"},
			Containers:         []corev1.Container{{Name: "app", Image: "registry.invalid/app:1"}},
		},
	}
	if meshed {
		always := corev1.ContainerRestartPolicyAlways
		p.Spec.InitContainers = []corev1.Container{{Name: meshpod.ProxyContainerName, Image: "registry.invalid/proxy:1", RestartPolicy: &always}}
	}
	if ip != "" {
		p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	}
	return p
}

// metricValue is the value of the metric name whose label values (in
// label-name order) are values; 0 when absent.
func metricValue(t testing.TB, reg *prometheus.Registry, name string, values ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.Metric {
			match := len(m.Label) == len(values)
			for i, l := range m.Label {
				match = match && l.GetValue() == values[i]
			}
			if !match {
				continue
			}
			switch {
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Counter != nil:
				return m.Counter.GetValue()
			}
		}
	}
	return 0
}
