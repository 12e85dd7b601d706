package destination

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"k8s.io/client-go/kubernetes"

	pb "github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// Server implements the Destination gRPC service.
type Server struct {
	pb.UnimplementedDestinationServer

	cfg      Config
	log      *slog.Logger
	metrics  *metrics
	watcher  *watcher
	policies *policies
	inbound  *inbound // nil until WatchInbound
	synced   atomic.Bool
	// callers counts the open streams of each caller (StreamInterceptor).
	callers  *streamCounts
	refusals *everyLog
}

// New builds a server watching the cluster through client. Its metrics are
// registered on reg. Call Run before serving.
func New(cfg Config, client kubernetes.Interface, reg prometheus.Registerer, log *slog.Logger) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("destination config: %w", err)
	}
	m := newMetrics(reg)
	w, err := newWatcher(cfg, client, log)
	if err != nil {
		return nil, err
	}
	if cfg.RemoteClustersNamespace != "" {
		if w.remote, err = newRemoteClusters(w, client, cfg.RemoteClustersNamespace, healthGauges{m.gatewayHealthy, m.gatewayLatency}, healthGauges{m.apiHealthy, m.apiLatency}, log); err != nil {
			return nil, err
		}
	}
	pol := newPolicies(cfg, w, client, m, log)
	w.serviceChanged = func() { pol.changed() }
	return &Server{cfg: cfg, log: log, metrics: m, watcher: w, policies: pol,
		callers: newStreamCounts(), refusals: newEveryLog(log, time.Minute)}, nil
}

// WatchRoutes makes GetOutboundPolicy follow HTTPRoutes, GRPCRoutes and
// ServiceProfiles through c, and write route status. Call it before Run;
// without it every Service gets its default route.
func (s *Server) WatchRoutes(c RouteClients) error {
	return s.policies.watch(c)
}

// Run starts the informers, waits for their caches, and processes changes
// until ctx ends. Streams are refused (Unavailable) until the caches have
// synced.
func (s *Server) Run(ctx context.Context) error {
	if s.watcher.remote != nil {
		go s.watcher.remote.run(ctx)
	}
	if err := s.watcher.start(ctx); err != nil {
		return err
	}
	if err := s.policies.start(ctx); err != nil {
		return err
	}
	s.synced.Store(true)
	s.log.Info("destination informer caches synced")
	policiesDone := make(chan struct{})
	go func() { defer close(policiesDone); s.policies.run(ctx) }()
	if s.inbound != nil {
		go s.inbound.run(ctx)
	}
	s.watcher.run(ctx, s.cfg.Workers)
	<-policiesDone // the status Lease released
	return nil
}

// Ready returns nil once the informer caches have synced.
func (s *Server) Ready() error {
	if !s.synced.Load() {
		return ErrNotReady
	}
	return nil
}

// Get streams the endpoints behind req.Path.
func (s *Server) Get(req *pb.GetDestination, stream grpc.ServerStreamingServer[pb.Update]) error {
	return grpcError(s.get(req, stream))
}

// GetProfile streams the profile of req.Path.
func (s *Server) GetProfile(req *pb.GetDestination, stream grpc.ServerStreamingServer[pb.DestinationProfile]) error {
	return grpcError(s.getProfile(req, stream))
}

// GetOutboundPolicy streams the routes of req.Path as the asking proxy's
// namespace (its context token) sees them, zone-aware for its node's zone.
func (s *Server) GetOutboundPolicy(req *pb.GetDestination, stream grpc.ServerStreamingServer[pb.OutboundPolicy]) error {
	return grpcError(s.getOutboundPolicy(req, stream))
}

func (s *Server) getOutboundPolicy(req *pb.GetDestination, stream grpc.ServerStreamingServer[pb.OutboundPolicy]) error {
	return serveTarget(s, req, stream, rpcGetOutboundPolicy, func(*pb.OutboundPolicy) string { return "policy" },
		func(t target, tr *translator[*pb.OutboundPolicy]) func() {
			return s.policies.subscribe(t, parseContext(req.GetContextToken()), tr)
		})
}

// clientContext is what the asking proxy says of itself in its context
// token ({"ns": "...", "nodeName": "..."}); zero values when the token
// is empty or not that JSON.
type clientContext struct {
	NS       string `json:"ns"`
	NodeName string `json:"nodeName"`
}

func parseContext(token string) clientContext {
	var c clientContext
	if json.Unmarshal([]byte(token), &c) != nil {
		return clientContext{}
	}
	return c
}

func (s *Server) get(req *pb.GetDestination, stream grpc.ServerStreamingServer[pb.Update]) error {
	return serveTarget(s, req, stream, rpcGet, updateKind, func(t target, tr *translator[*pb.Update]) func() {
		return s.watcher.subscribe(t,
			func(p *publisher) { p.subscribeGet(tr) },
			func(p *publisher) bool { return p.unsubscribe(tr, nil) })
	})
}

func (s *Server) getProfile(req *pb.GetDestination, stream grpc.ServerStreamingServer[pb.DestinationProfile]) error {
	return serveTarget(s, req, stream, rpcGetProfile, func(*pb.DestinationProfile) string { return "profile" },
		func(t target, tr *translator[*pb.DestinationProfile]) func() {
			return s.watcher.subscribe(t,
				func(p *publisher) { p.subscribeProfile(tr) },
				func(p *publisher) bool { return p.unsubscribe(nil, tr) })
		})
}

// serveTarget serves one of the streaming RPCs on req's target: a
// translator queues what subscribe feeds it (counted by kind in the
// updates metric, ended on overflow), streamed to the client until it
// goes; subscribe returns the unsubscribe.
func serveTarget[M any](s *Server, req *pb.GetDestination, stream grpc.ServerStreamingServer[M], rpc string,
	kind func(*M) string, subscribe func(target, *translator[*M]) func()) error {
	t, err := s.resolve(req)
	if err != nil {
		return err
	}
	tr := newTranslator(s.cfg.QueueSize,
		func(m *M) { s.metrics.updates.WithLabelValues(rpc, kind(m)).Inc() },
		s.overflowed(rpc, req.GetPath()))
	defer subscribe(t, tr)()
	return serveStream(s, stream.Context(), rpc, tr, stream.Send)
}

func (s *Server) resolve(req *pb.GetDestination) (target, error) {
	if err := s.Ready(); err != nil {
		return target{}, err
	}
	return parsePath(req.GetPath(), s.cfg.ClusterDomain)
}

func (s *Server) overflowed(rpc, path string) func() {
	return func() {
		s.metrics.overflow.WithLabelValues(rpc).Inc()
		s.log.Warn("destination stream overflowed; ending it", "rpc", rpc, "path", path, "queue_size", s.cfg.QueueSize)
	}
}

// serveStream counts the open stream while tr is pumped into send.
func serveStream[T any](s *Server, ctx context.Context, rpc string, tr *translator[T], send func(T) error) error {
	g := s.metrics.streams.WithLabelValues(rpc)
	g.Inc()
	defer g.Dec()
	return tr.pump(ctx, send)
}
