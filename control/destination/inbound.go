package destination

import (
	"context"
	"fmt"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	corev1 "k8s.io/api/core/v1"

	pb "github.com/plexus-mesh/plexus/control/api/destinationpb"
	"github.com/plexus-mesh/plexus/control/spiffe"
)

// WatchInbound makes GetInboundPolicy answer, from Servers,
// AuthorizationPolicies, authentications and rate limits
// (policy.plexus.dev; a CRD not installed counts as none), the
// HTTPRoutes and GRPCRoutes whose parent is a Server, pods and
// namespaces. Call it after WatchRoutes (whose informers it shares) and
// before Run; without it GetInboundPolicy is Unimplemented.
func (s *Server) WatchInbound(c RouteClients) error {
	if s.policies.dynFactory == nil {
		return fmt.Errorf("WatchInbound: call WatchRoutes first")
	}
	in, err := newInbound(s.cfg, s.watcher, s.policies, c, s.log)
	if err != nil {
		return err
	}
	s.inbound = in
	return nil
}

// GetInboundPolicy streams the inbound policy of one port of the asking
// proxy's own pod.
func (s *Server) GetInboundPolicy(req *pb.InboundPolicyRequest, stream grpc.ServerStreamingServer[pb.InboundPolicy]) error {
	return grpcError(s.getInboundPolicy(req, stream))
}

func (s *Server) getInboundPolicy(req *pb.InboundPolicyRequest, stream grpc.ServerStreamingServer[pb.InboundPolicy]) error {
	if err := s.Ready(); err != nil {
		return err
	}
	if s.inbound == nil {
		return ErrNoInbound
	}
	if req.GetNamespace() == "" || req.GetPod() == "" || req.GetPort() == 0 || req.GetPort() > 65535 {
		return &RequestError{Reason: fmt.Sprintf("inbound policy request {namespace %q, pod %q, port %d}: want a namespace, a pod and a port 1-65535", req.GetNamespace(), req.GetPod(), req.GetPort())}
	}
	var caller spiffe.ID
	if s.cfg.VerifyInboundCaller {
		var err error
		if caller, err = callerID(stream.Context()); err != nil {
			return &PermissionError{Reason: err.Error()}
		}
	}
	pod, err := s.watcher.podList.Pods(req.GetNamespace()).Get(req.GetPod())
	if err != nil {
		return &NotFoundError{What: "pod " + req.GetNamespace() + "/" + req.GetPod()}
	}
	if want := podIdentity(s.cfg.TrustDomain, pod); s.cfg.VerifyInboundCaller && caller != want {
		return &PermissionError{Reason: fmt.Sprintf("the inbound policy of pod %s/%s is for its own proxy, %s; the caller is %s", pod.Namespace, pod.Name, want, caller)}
	}
	tr := newTranslator(s.cfg.QueueSize,
		func(*pb.InboundPolicy) { s.metrics.updates.WithLabelValues(rpcGetInboundPolicy, "policy").Inc() },
		s.overflowed(rpcGetInboundPolicy, fmt.Sprintf("%s/%s:%d", pod.Namespace, pod.Name, req.GetPort())))
	unsubscribe := s.inbound.subscribe(pod, uint16(req.GetPort()), tr)
	defer unsubscribe()
	return serveStream(s, stream.Context(), rpcGetInboundPolicy, tr, stream.Send)
}

// callerID is the identity the caller's verified TLS client certificate
// names.
func callerID(ctx context.Context) (spiffe.ID, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return spiffe.ID{}, fmt.Errorf("the caller is unknown")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return spiffe.ID{}, fmt.Errorf("the caller presented no verified TLS client certificate: the inbound policy of a pod is for its own proxy")
	}
	id, err := spiffe.FromCert(info.State.VerifiedChains[0][0])
	if err != nil {
		return spiffe.ID{}, fmt.Errorf("the caller's client certificate: %w", err)
	}
	return id, nil
}

// podIdentity is the mesh identity of pod's proxy.
func podIdentity(trustDomain string, pod *corev1.Pod) spiffe.ID {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	return spiffe.New(trustDomain, pod.Namespace, sa)
}
