package destination

import (
	"context"
	"fmt"
	"net/netip"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	corev1 "k8s.io/api/core/v1"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
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
	pod, err := s.inboundPod(stream.Context(), req)
	if err != nil {
		return err
	}
	tr := newTranslator(s.cfg.QueueSize,
		func(*pb.InboundPolicy) { s.metrics.updates.WithLabelValues(rpcGetInboundPolicy, "policy").Inc() },
		s.overflowed(rpcGetInboundPolicy, fmt.Sprintf("%s/%s:%d", pod.Namespace, pod.Name, req.GetPort())))
	unsubscribe := s.inbound.subscribe(pod, uint16(req.GetPort()), tr)
	defer unsubscribe()
	return serveStream(s, stream.Context(), rpcGetInboundPolicy, tr, stream.Send)
}

// inboundPod is the pod whose inbound policy req asks for, when the
// caller may have it: with Config.VerifyInboundCaller, only a caller
// whose verified client certificate names the pod's service account. A
// pod of another service account and one destination does not know get
// the same PermissionDenied, so that a proxy cannot learn which pods
// exist, or under which identity, by asking.
func (s *Server) inboundPod(ctx context.Context, req *pb.InboundPolicyRequest) (*corev1.Pod, error) {
	ns, name := req.GetNamespace(), req.GetPod()
	if !s.cfg.VerifyInboundCaller {
		pod, err := s.watcher.podList.Pods(ns).Get(name)
		if err != nil {
			return nil, &NotFoundError{What: "pod " + ns + "/" + name}
		}
		return pod, nil
	}
	id, reason, err := callerID(ctx)
	if err != nil {
		s.refuse(rpcGetInboundPolicy, reason, callerOf(ctx), err)
		return nil, &PermissionError{Reason: err.Error()}
	}
	pod, err := s.watcher.podList.Pods(ns).Get(name)
	if err != nil || podIdentity(s.cfg.TrustDomain, pod) != id {
		err := &PermissionError{Reason: fmt.Sprintf("the inbound policy of pod %s/%s is for that pod's own proxy only, and the caller %s is not the identity of a pod of that name that destination knows", ns, name, id)}
		s.refuse(rpcGetInboundPolicy, reasonNotOwnPod, caller{id: id}, err)
		return nil, err
	}
	return pod, nil
}

// callerOf describes the caller of ctx for a log line.
func callerOf(ctx context.Context) caller {
	c := caller{addr: "unknown"}
	if p, ok := peer.FromContext(ctx); ok && p.Addr != nil {
		c.addr = p.Addr.String()
		c.loopback = isLoopback(c.addr)
		if ap, err := netip.ParseAddrPort(c.addr); err == nil {
			c.addr = ap.Addr().Unmap().WithZone("").String()
		}
	}
	return c
}

// callerID is the identity the caller's verified TLS client certificate
// names, or why there is none and the refusal reason.
func callerID(ctx context.Context) (spiffe.ID, string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return spiffe.ID{}, reasonNoCertificate, fmt.Errorf("the caller is unknown")
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.VerifiedChains) == 0 || len(info.State.VerifiedChains[0]) == 0 {
		return spiffe.ID{}, reasonNoCertificate, fmt.Errorf("the caller presented no verified TLS client certificate: the inbound policy of a pod is for its own proxy")
	}
	id, err := spiffe.FromCert(info.State.VerifiedChains[0][0])
	if err != nil {
		return spiffe.ID{}, reasonInvalidIdentity, fmt.Errorf("the caller's client certificate: %w", err)
	}
	return id, "", nil
}

// podIdentity is the mesh identity of pod's proxy.
func podIdentity(trustDomain string, pod *corev1.Pod) spiffe.ID {
	sa := pod.Spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	return spiffe.New(trustDomain, pod.Namespace, sa)
}
