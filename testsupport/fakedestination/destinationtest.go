// Package fakedestination is a destination gRPC server that tests drive:
// each Get stream is answered with the snapshot the test set for its path
// (NoEndpoints{exists: false} when none), then with whatever the test pushes.
package fakedestination

import (
	"crypto/tls"
	"net"
	"net/netip"
	"strconv"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

// Server implements destinationpb.DestinationServer.
type Server struct {
	destinationpb.UnimplementedDestinationServer
	// Opened and Closed receive the path of each stream as it opens and ends.
	Opened, Closed chan string

	mu       sync.Mutex
	snapshot map[string]*destinationpb.Update
	streams  map[string][]chan *destinationpb.Update
	policies map[string]*destinationpb.OutboundPolicy
	inbound  map[uint32]*destinationpb.InboundPolicy
	inboundC map[uint32][]chan *destinationpb.InboundPolicy
	// InboundRequests receives each GetInboundPolicy request.
	InboundRequests chan *destinationpb.InboundPolicyRequest
	gs              *grpc.Server
}

// Serve serves Get on ln over TLS with a certificate for id from ca,
// requiring client certificates that chain to ca. Stop ends it.
func Serve(ln net.Listener, ca *testpki.CA, id spiffe.ID) *Server {
	s := &Server{
		Opened: make(chan string, 100), Closed: make(chan string, 100),
		snapshot: map[string]*destinationpb.Update{}, streams: map[string][]chan *destinationpb.Update{},
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{*ca.Leaf(id)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Roots(),
	}
	s.gs = grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)))
	destinationpb.RegisterDestinationServer(s.gs, s)
	go s.gs.Serve(ln)
	return s
}

// Stop closes the listener and every stream.
func (s *Server) Stop() { s.gs.Stop() }

// Set makes u the first message of later streams for path.
func (s *Server) Set(path string, u *destinationpb.Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.snapshot[path] = u
}

// Push sends u on every open stream for path.
func (s *Server) Push(path string, u *destinationpb.Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ch := range s.streams[path] {
		ch <- u
	}
}

// Get answers the snapshot, then pushed updates.
func (s *Server) Get(req *destinationpb.GetDestination, st grpc.ServerStreamingServer[destinationpb.Update]) error {
	ch := make(chan *destinationpb.Update, 16)
	s.mu.Lock()
	first := s.snapshot[req.GetPath()]
	s.streams[req.GetPath()] = append(s.streams[req.GetPath()], ch)
	s.mu.Unlock()
	if first == nil {
		first = &destinationpb.Update{Update: &destinationpb.Update_NoEndpoints{NoEndpoints: &destinationpb.NoEndpoints{}}}
	}
	s.Opened <- req.GetPath()
	defer func() { s.Closed <- req.GetPath() }()
	if err := st.Send(first); err != nil {
		return err
	}
	for {
		select {
		case u := <-ch:
			if err := st.Send(u); err != nil {
				return err
			}
		case <-st.Context().Done():
			return nil
		}
	}
}

// Add is an Add update of addrs (service label "web").
func Add(addrs ...*destinationpb.WeightedAddr) *destinationpb.Update {
	return &destinationpb.Update{Update: &destinationpb.Update_Add{Add: &destinationpb.AddrSet{Addrs: addrs, MetricLabels: map[string]string{"service": "web"}}}}
}

// Remove is a Remove update of addrs.
func Remove(addrs ...*destinationpb.WeightedAddr) *destinationpb.Update {
	return &destinationpb.Update{Update: &destinationpb.Update_Remove{Remove: &destinationpb.AddrSet{Addrs: addrs}}}
}

// NoEndpoints is a NoEndpoints update.
func NoEndpoints(exists bool) *destinationpb.Update {
	return &destinationpb.Update{Update: &destinationpb.Update_NoEndpoints{NoEndpoints: &destinationpb.NoEndpoints{Exists: exists}}}
}

// Endpoint is a WeightedAddr for addr ("ip:port"), meshed with id unless
// id is zero.
func Endpoint(addr string, id spiffe.ID) *destinationpb.WeightedAddr {
	ap := netip.MustParseAddrPort(addr)
	w := &destinationpb.WeightedAddr{Addr: &destinationpb.TcpAddress{Ip: ap.Addr().AsSlice(), Port: uint32(ap.Port())}, Weight: 10000,
		MetricLabels: map[string]string{"pod": "web-" + addr}}
	if !id.IsZero() {
		w.TlsIdentity = &destinationpb.TlsIdentity{SpiffeId: id.String()}
	}
	return w
}

// SetPolicy makes p the outbound policy of later GetOutboundPolicy streams
// for path.
func (s *Server) SetPolicy(path string, p *destinationpb.OutboundPolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.policies == nil {
		s.policies = map[string]*destinationpb.OutboundPolicy{}
	}
	s.policies[path] = p
}

// GetOutboundPolicy answers the policy set for the path; a path with
// endpoints set and no policy gets what destination gives a Service
// without routes (DefaultPolicy); any other, a policy with no parent.
func (s *Server) GetOutboundPolicy(req *destinationpb.GetDestination, st grpc.ServerStreamingServer[destinationpb.OutboundPolicy]) error {
	s.mu.Lock()
	p, ok := s.policies[req.GetPath()]
	_, known := s.snapshot[req.GetPath()]
	s.mu.Unlock()
	switch {
	case ok:
	case known:
		p = DefaultPolicy(req.GetPath())
	default:
		p = &destinationpb.OutboundPolicy{Source: "default"}
	}
	if err := st.Send(p); err != nil {
		return err
	}
	<-st.Context().Done()
	return nil
}

// DefaultPolicy is the policy of Service "web" in namespace "default"
// with no routes: the default route to itself.
func DefaultPolicy(path string) *destinationpb.OutboundPolicy {
	_, portText, _ := net.SplitHostPort(path)
	port, _ := strconv.ParseUint(portText, 10, 32)
	parent := &destinationpb.ResourceRef{Group: "core", Kind: "Service", Namespace: "default", Name: "web", Port: uint32(port)}
	return &destinationpb.OutboundPolicy{
		Parent: parent,
		Source: "default",
		Routes: []*destinationpb.OutboundRoute{{
			Ref: &destinationpb.ResourceRef{Kind: "default", Name: "http"},
			Rules: []*destinationpb.OutboundRule{{
				Backends: []*destinationpb.Backend{{Ref: parent, Weight: 1, Authority: "web.default.svc.cluster.local:" + portText}},
			}},
		}},
	}
}

// SetInbound makes p the inbound policy of port, for open streams too.
func (s *Server) SetInbound(port uint32, p *destinationpb.InboundPolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.inbound == nil {
		s.inbound = map[uint32]*destinationpb.InboundPolicy{}
	}
	s.inbound[port] = p
	for _, c := range s.inboundC[port] {
		c <- p
	}
}

// GetInboundPolicy streams the inbound policy set for the port; a port
// with none gets nothing until one is set.
func (s *Server) GetInboundPolicy(req *destinationpb.InboundPolicyRequest, st grpc.ServerStreamingServer[destinationpb.InboundPolicy]) error {
	if s.InboundRequests != nil {
		select {
		case s.InboundRequests <- req:
		default:
		}
	}
	c := make(chan *destinationpb.InboundPolicy, 16)
	s.mu.Lock()
	if s.inboundC == nil {
		s.inboundC = map[uint32][]chan *destinationpb.InboundPolicy{}
	}
	s.inboundC[req.GetPort()] = append(s.inboundC[req.GetPort()], c)
	if p, ok := s.inbound[req.GetPort()]; ok {
		c <- p
	}
	s.mu.Unlock()
	for {
		select {
		case p := <-c:
			if err := st.Send(p); err != nil {
				return err
			}
		case <-st.Context().Done():
			return nil
		}
	}
}
