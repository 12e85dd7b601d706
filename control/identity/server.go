package identity

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/types/known/timestamppb"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/mesh/api/identitypb"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// Deps are the service's collaborators.
type Deps struct {
	Client  kubernetes.Interface // TokenReviews and the issuer Secret
	Metrics prometheus.Registerer
	Log     *slog.Logger
	Now     func() time.Time // nil means time.Now
}

// Server implements identitypb.IdentityServer. Run loads the issuer; until
// then Certify fails with ErrIssuerNotLoaded.
type Server struct {
	identitypb.UnimplementedIdentityServer

	cfg     Config
	client  kubernetes.Interface
	log     *slog.Logger
	now     func() time.Time
	metrics *metrics

	issuer  atomic.Pointer[loadedIssuer]
	loadErr atomic.Pointer[error] // why the last Secret version was refused, if it was

	pending atomic.Pointer[secretVersion] // newest Secret version seen by the informer
	kick    chan struct{}                 // one slot: pending changed

	serving servingCert
}

type loadedIssuer struct {
	issuer          *pki.Issuer
	anchors         *x509.CertPool
	resourceVersion string
}

// New checks cfg and returns a Server; call Run to load the issuer.
func New(cfg Config, deps Deps) (*Server, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if deps.Client == nil || deps.Metrics == nil || deps.Log == nil {
		return nil, errors.New("identity: Client, Metrics and Log are required")
	}
	m := newMetrics(deps.Metrics)
	now := deps.Now
	if now == nil {
		now = time.Now
	}
	return &Server{cfg: cfg, client: deps.Client, log: deps.Log, now: now, metrics: m, kick: make(chan struct{}, 1)}, nil
}

// ID is the service's own identity, named in its serving certificate.
func (s *Server) ID() spiffe.ID {
	return spiffe.New(s.cfg.TrustDomain, s.cfg.Namespace, s.cfg.ServiceAccount)
}

// Ready is nil once an issuer is loaded, else an error saying why not.
func (s *Server) Ready() error {
	if s.issuer.Load() != nil {
		return nil
	}
	if e := s.loadErr.Load(); e != nil {
		return fmt.Errorf("%w from Secret %s/%s: %w", ErrIssuerNotLoaded, s.cfg.Namespace, s.cfg.SecretName, *e)
	}
	return fmt.Errorf("%w: waiting for Secret %s/%s", ErrIssuerNotLoaded, s.cfg.Namespace, s.cfg.SecretName)
}

// Anchors returns the trust anchors of the loaded issuer Secret, or nil.
func (s *Server) Anchors() *x509.CertPool {
	if l := s.issuer.Load(); l != nil {
		return l.anchors
	}
	return nil
}

// Certify implements identitypb.IdentityServer.
func (s *Server) Certify(ctx context.Context, req *identitypb.CertifyRequest) (*identitypb.CertifyResponse, error) {
	resp, id, err := s.certify(ctx, req)
	if err != nil {
		gerr, reason := grpcError(err)
		s.metrics.rejected.WithLabelValues(reason).Inc()
		s.log.Info("certify refused", "identity", req.GetIdentity(), "reason", reason, "error", err)
		return nil, gerr
	}
	s.metrics.issued.Inc()
	s.log.Debug("certified", "identity", id, "valid_until", resp.ValidUntil.AsTime())
	return resp, nil
}

func (s *Server) certify(ctx context.Context, req *identitypb.CertifyRequest) (*identitypb.CertifyResponse, spiffe.ID, error) {
	id, err := spiffe.Parse(req.GetIdentity())
	if err != nil {
		return nil, id, fmt.Errorf("%w: %w", ErrInvalidIdentity, err)
	}
	if id.TrustDomain != s.cfg.TrustDomain {
		return nil, id, fmt.Errorf("%w: %s is not in trust domain %s", ErrInvalidIdentity, id, s.cfg.TrustDomain)
	}
	csr, err := parseCSR(req.GetCertificateSigningRequest(), id)
	if err != nil {
		return nil, id, err
	}
	if err := s.review(ctx, req.GetToken(), id); err != nil {
		return nil, id, err
	}
	if err := s.checkReserved(ctx, id); err != nil {
		return nil, id, err
	}
	l := s.issuer.Load()
	if l == nil {
		return nil, id, s.Ready()
	}
	leaf, err := l.issuer.Issue(csr, pki.Leaf{ID: id, Lifetime: s.cfg.CertLifetime, ClockSkew: s.cfg.ClockSkew, Now: s.now()})
	if err != nil {
		return nil, id, fmt.Errorf("%w: %w", ErrIssue, err)
	}
	resp := &identitypb.CertifyResponse{LeafCertificate: leaf.Raw, ValidUntil: timestamppb.New(leaf.NotAfter)}
	for _, c := range l.issuer.Chain() {
		resp.IntermediateCertificates = append(resp.IntermediateCertificates, c.Raw)
	}
	return resp, id, nil
}

// parseCSR parses a DER CSR, checks its signature and that it asks for
// exactly id and nothing else.
func parseCSR(der []byte, id spiffe.ID) (*x509.CertificateRequest, error) {
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: signature: %w", ErrInvalidCSR, err)
	}
	switch {
	case len(csr.URIs) == 0:
		return nil, fmt.Errorf("%w: it has no URI SAN, want %s", ErrCSRMismatch, id)
	case len(csr.URIs) > 1:
		return nil, fmt.Errorf("%w: it has %d URI SANs %v, want only %s", ErrCSRMismatch, len(csr.URIs), csr.URIs, id)
	case len(csr.DNSNames) > 0:
		return nil, fmt.Errorf("%w: it also asks for DNS names %v", ErrCSRMismatch, csr.DNSNames)
	case len(csr.IPAddresses) > 0:
		return nil, fmt.Errorf("%w: it also asks for IP addresses %v", ErrCSRMismatch, csr.IPAddresses)
	case len(csr.EmailAddresses) > 0:
		return nil, fmt.Errorf("%w: it also asks for e-mail addresses %v", ErrCSRMismatch, csr.EmailAddresses)
	case csr.URIs[0].String() != id.String():
		return nil, fmt.Errorf("%w: it asks for %s, not %s", ErrCSRMismatch, csr.URIs[0], id)
	}
	return csr, nil
}

// review checks with a TokenReview that token is authenticated, valid for
// the configured audience, and belongs to the service account of id.
func (s *Server) review(ctx context.Context, token []byte, id spiffe.ID) error {
	if len(token) == 0 {
		return fmt.Errorf("%w: no token in the request", ErrUnauthenticated)
	}
	tr, err := s.client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: string(token), Audiences: []string{s.cfg.Audience}},
	}, metav1.CreateOptions{})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("TokenReview: %w", ctx.Err())
		}
		return fmt.Errorf("%w: %w", ErrTokenReviewFailed, err)
	}
	st := tr.Status
	if !st.Authenticated {
		msg := st.Error
		if msg == "" {
			msg = "the API server did not authenticate it"
		}
		return fmt.Errorf("%w: %s", ErrUnauthenticated, msg)
	}
	if !slices.Contains(st.Audiences, s.cfg.Audience) {
		return fmt.Errorf("%w: token audiences %v do not include %s", ErrWrongAudience, st.Audiences, s.cfg.Audience)
	}
	if want := "system:serviceaccount:" + id.Namespace + ":" + id.ServiceAccount; st.User.Username != want {
		return fmt.Errorf("%w: the token is %q, the request asks for %s", ErrIdentityMismatch, st.User.Username, id)
	}
	return nil
}

// servingCert is the service's own TLS certificate, issued by itself.
type servingCert struct {
	mu sync.Mutex
	c  *issuedCert
}
