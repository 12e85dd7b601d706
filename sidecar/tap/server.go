package tap

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/plexus-mesh/plexus/mesh/api/tappb"
	"github.com/plexus-mesh/plexus/mesh/identity/mtls"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// ServerOptions configure the tap server.
type ServerOptions struct {
	Hub *Hub
	// Certs is the proxy's identity: the server presents its certificate
	// and verifies clients to its trust anchors.
	Certs mtls.CertSource
	// Allowed is the only client identity served (the tap service's).
	Allowed spiffe.ID
	Log     *slog.Logger
}

// NewServer returns the gRPC tap server: mutual TLS, and only Allowed may
// call it; any other client's handshake fails.
func NewServer(o ServerOptions) *grpc.Server {
	cfg := &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAnyClientCert, // verified below, to the current roots
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return o.Certs.Certificate()
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyTapper(cs, o.Certs, o.Allowed)
		},
	}
	s := grpc.NewServer(grpc.Creds(credentials.NewTLS(cfg)),
		grpc.ConnectionTimeout(5*time.Second),
		grpc.MaxRecvMsgSize(MaxRequestBytes),
		grpc.MaxConcurrentStreams(MaxSessions),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 10 * time.Second}))
	tappb.RegisterTapServer(s, &server{o: o})
	return s
}

// verifyTapper accepts a client whose chain verifies to the trust anchors
// and whose identity is allowed.
func verifyTapper(cs tls.ConnectionState, certs mtls.CertSource, allowed spiffe.ID) error {
	chains, err := mtls.VerifyChain(cs.PeerCertificates, certs.Roots(), x509.ExtKeyUsageClientAuth)
	if err != nil {
		return fmt.Errorf("tap: client certificate: %w", err)
	}
	if _, err := spiffe.VerifyPeer(chains, allowed); err != nil {
		return fmt.Errorf("tap: only %s may tap this proxy: %w", allowed, err)
	}
	return nil
}

type server struct {
	tappb.UnimplementedTapServer
	o ServerOptions
}

// Observe streams the events of the requests the filter matches until the
// caller leaves or the limit is reached.
func (s *server) Observe(req *tappb.ObserveRequest, stream tappb.Tap_ObserveServer) error {
	sub, err := s.o.Hub.Subscribe(req)
	switch {
	case errors.Is(err, ErrTooMany):
		return status.Error(codes.ResourceExhausted, err.Error())
	case err != nil:
		return status.Error(codes.InvalidArgument, err.Error())
	}
	defer sub.Close()
	if p, ok := peer.FromContext(stream.Context()); ok && s.o.Log != nil {
		s.o.Log.Info("tap session opened", "client", p.Addr.String())
	}
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	ctx := stream.Context()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev := <-sub.Events():
			if err := stream.Send(ev); err != nil {
				return err
			}
		case <-ticker.C:
			if n := sub.TakeDropped(); n > 0 {
				ev := &tappb.TapEvent{UnixNano: time.Now().UnixNano(), Event: &tappb.TapEvent_Dropped{Dropped: &tappb.Dropped{Count: n}}}
				if err := stream.Send(ev); err != nil {
					return err
				}
			}
		case <-sub.Done():
			return flush(sub, stream)
		}
	}
}

// flush sends what the session still holds once its limit is reached.
func flush(sub *Subscription, stream tappb.Tap_ObserveServer) error {
	for {
		select {
		case ev := <-sub.Events():
			if err := stream.Send(ev); err != nil {
				return err
			}
		default:
			if n := sub.TakeDropped(); n > 0 {
				return stream.Send(&tappb.TapEvent{UnixNano: time.Now().UnixNano(), Event: &tappb.TapEvent_Dropped{Dropped: &tappb.Dropped{Count: n}}})
			}
			return nil
		}
	}
}

// Serve serves the tap API on ln until it is closed.
func Serve(s *grpc.Server, ln net.Listener) error {
	if err := s.Serve(ln); err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("tap server: %w", err)
	}
	return nil
}
