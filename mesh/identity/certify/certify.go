// Package certify is the client of the identity service: it keeps a
// workload's certificate for its SPIFFE identity, generating the key in
// memory, proving the identity with a service-account token, and renewing
// before expiry with backoff on failure.
package certify

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/plexus-mesh/plexus/mesh/api/identitypb"
	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// DefaultRenew is the fraction of a certificate's lifetime after which it
// is renewed.
const DefaultRenew = 0.7

// Config configures a Client.
type Config struct {
	Addr         string    // identity service host:port
	ServerID     spiffe.ID // expected identity of the identity server
	ID           spiffe.ID // the identity to ask for
	TokenFile    string    // projected SA token, re-read on every request
	TrustAnchors *x509.CertPool
	Renew        float64 // fraction of lifetime; 0 means 0.7
	Log          *slog.Logger
}

// Validate reports what is wrong with c.
func (c Config) Validate() error {
	var errs []error
	if c.Addr == "" {
		errs = append(errs, errors.New("identity service address is empty"))
	}
	if c.ServerID.IsZero() {
		errs = append(errs, errors.New("identity server ID is empty"))
	}
	if c.ID.IsZero() {
		errs = append(errs, errors.New("identity to ask for is empty"))
	}
	if c.TokenFile == "" {
		errs = append(errs, errors.New("token file is empty"))
	}
	if c.TrustAnchors == nil {
		errs = append(errs, errors.New("trust anchors are missing"))
	}
	if c.Renew < 0 || c.Renew >= 1 {
		errs = append(errs, fmt.Errorf("renew fraction %v must be in (0, 1), or 0 for %v", c.Renew, DefaultRenew))
	}
	if c.Log == nil {
		errs = append(errs, errors.New("logger is missing"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("certify config: %w", err)
	}
	return nil
}

// Timings of requests and retries.
const (
	requestTimeout = 15 * time.Second
	backoffMin     = 500 * time.Millisecond
	backoffMax     = 30 * time.Second
)

// Client obtains and renews the certificate of one identity.
type Client struct {
	cfg Config
	now func() time.Time
	// retry delays; fields so that tests can shorten them
	backoffMin, backoffMax time.Duration

	mu        sync.Mutex
	cert      *tls.Certificate // nil until the first certificate
	lastErr   error            // of the last failed attempt since the last success
	attempted bool
}

// New checks cfg and returns a Client; call Run to obtain certificates.
func New(cfg Config) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.Renew == 0 {
		cfg.Renew = DefaultRenew
	}
	return &Client{cfg: cfg, now: time.Now, backoffMin: backoffMin, backoffMax: backoffMax}, nil
}

// ID is the identity the client asks for.
func (c *Client) ID() spiffe.ID { return c.cfg.ID }

// Roots are the trust anchors peers' certificates must chain to.
func (c *Client) Roots() *x509.CertPool { return c.cfg.TrustAnchors }

// Run obtains a certificate, then renews it at Renew of its lifetime, with
// capped exponential backoff and jitter after failures, until ctx ends.
// A held certificate stays in use while renewals fail, as long as it is
// valid.
func (c *Client) Run(ctx context.Context) error {
	failures := 0
	for {
		var wait time.Duration
		renewAt, err := c.obtain(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			failures++
			wait = c.backoff(failures)
			c.log().Warn("certificate request failed", "identity", c.cfg.ID, "attempt", failures, "retry_in", wait, "error", err)
		} else {
			failures = 0
			wait = renewAt.Sub(c.now())
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

func (c *Client) log() *slog.Logger { return c.cfg.Log }

// backoff is the delay after n consecutive failures: exponential from
// backoffMin, capped at backoffMax, with jitter in [d/2, d].
func (c *Client) backoff(n int) time.Duration {
	d := c.backoffMin
	for i := 1; i < n && d < c.backoffMax; i++ {
		d *= 2
	}
	d = min(d, c.backoffMax)
	return d/2 + rand.N(d/2+1)
}

// obtain requests a certificate and stores it; it returns when to renew.
func (c *Client) obtain(ctx context.Context) (time.Time, error) {
	cert, err := c.request(ctx)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.attempted = true
	if err != nil {
		c.lastErr = err
		return time.Time{}, err
	}
	c.cert, c.lastErr = cert, nil
	now := c.now()
	renewAt := now.Add(time.Duration(c.cfg.Renew * float64(cert.Leaf.NotAfter.Sub(now))))
	c.log().Info("certificate issued", "identity", c.cfg.ID, "not_after", cert.Leaf.NotAfter, "renew_at", renewAt)
	return renewAt, nil
}

// request makes one Certify call with a fresh key and the current token.
func (c *Client) request(ctx context.Context) (*tls.Certificate, error) {
	token, err := os.ReadFile(c.cfg.TokenFile)
	if err != nil {
		return nil, fmt.Errorf("reading the service-account token: %w", err)
	}
	if token = bytes.TrimSpace(token); len(token) == 0 {
		return nil, fmt.Errorf("service-account token file %s is empty", c.cfg.TokenFile)
	}
	key, csr, err := pki.NewCSR(c.cfg.ID)
	if err != nil {
		return nil, err
	}
	conn, err := grpc.NewClient(c.cfg.Addr, grpc.WithTransportCredentials(credentials.NewTLS(c.serverTLS())))
	if err != nil {
		return nil, fmt.Errorf("identity service %s: %w", c.cfg.Addr, err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, requestTimeout)
	defer cancel()
	resp, err := identitypb.NewIdentityClient(conn).Certify(ctx, &identitypb.CertifyRequest{
		Identity: c.cfg.ID.String(), Token: token, CertificateSigningRequest: csr,
	})
	if err != nil {
		return nil, c.describe(err)
	}
	leaf, chain, err := c.checkResponse(resp)
	if err != nil {
		return nil, fmt.Errorf("identity service %s answered with an unusable certificate: %w", c.cfg.Addr, err)
	}
	if !key.PublicKey.Equal(leaf.PublicKey) {
		return nil, fmt.Errorf("identity service %s answered with a certificate for another key", c.cfg.Addr)
	}
	return &tls.Certificate{Certificate: chain, PrivateKey: key, Leaf: leaf}, nil
}

// describe names the service and says whether it was unreachable or
// refused the request.
func (c *Client) describe(err error) error {
	st, _ := status.FromError(err)
	what := "refused the request"
	switch st.Code() {
	case codes.Unavailable, codes.DeadlineExceeded:
		what = "unreachable"
	}
	return fmt.Errorf("identity service %s (%s) %s: %s: %w", c.cfg.Addr, c.cfg.ServerID, what, st.Code(), err)
}

// checkResponse verifies the issued leaf: it chains to the anchors now and
// names exactly the identity asked for. It returns the DER chain to present.
func (c *Client) checkResponse(resp *identitypb.CertifyResponse) (*x509.Certificate, [][]byte, error) {
	leaf, err := x509.ParseCertificate(resp.GetLeafCertificate())
	if err != nil {
		return nil, nil, fmt.Errorf("leaf: %w", err)
	}
	chain := [][]byte{leaf.Raw}
	inter := x509.NewCertPool()
	for i, der := range resp.GetIntermediateCertificates() {
		ic, err := x509.ParseCertificate(der)
		if err != nil {
			return nil, nil, fmt.Errorf("intermediate %d: %w", i, err)
		}
		inter.AddCert(ic)
		chain = append(chain, der)
	}
	chains, err := leaf.Verify(x509.VerifyOptions{
		Roots: c.cfg.TrustAnchors, Intermediates: inter, CurrentTime: c.now(),
		KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("leaf does not verify to the trust anchors: %w", err)
	}
	if _, err := spiffe.VerifyPeer(chains, c.cfg.ID); err != nil {
		return nil, nil, err
	}
	return leaf, chain, nil
}

// serverTLS verifies the identity server: its chain to the trust anchors
// and its exact SPIFFE ID (the SAN is a URI, so the standard host name
// check is replaced by this one).
func (c *Client) serverTLS() *tls.Config {
	return &tls.Config{
		MinVersion:         tls.VersionTLS13,
		InsecureSkipVerify: true, // VerifyConnection verifies the chain and the SPIFFE ID
		VerifyConnection: func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("identity server presented no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			chains, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
				Roots: c.cfg.TrustAnchors, Intermediates: inter, CurrentTime: c.now(),
				KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			})
			if err != nil {
				return fmt.Errorf("identity server certificate: %w", err)
			}
			if _, err := spiffe.VerifyPeer(chains, c.cfg.ServerID); err != nil {
				return fmt.Errorf("identity server: %w", err)
			}
			return nil
		},
	}
}

// Ready is nil once a currently valid certificate is held, else an error
// naming why not.
func (c *Client) Ready() error {
	_, err := c.Certificate()
	return err
}

// Certificate returns the current leaf and issuer chain with its private
// key, or an error naming why there is no valid one.
func (c *Client) Certificate() (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.cert != nil && c.now().Before(c.cert.Leaf.NotAfter):
		return c.cert, nil
	case c.cert != nil && c.lastErr != nil:
		return nil, fmt.Errorf("certificate for %s expired at %s; renewing failed: %w", c.cfg.ID, c.cert.Leaf.NotAfter.Format(time.RFC3339), c.lastErr)
	case c.cert != nil:
		return nil, fmt.Errorf("certificate for %s expired at %s; renewal pending", c.cfg.ID, c.cert.Leaf.NotAfter.Format(time.RFC3339))
	case !c.attempted:
		return nil, fmt.Errorf("no certificate for %s yet: waiting for identity service %s (%s)", c.cfg.ID, c.cfg.Addr, c.cfg.ServerID)
	default:
		return nil, fmt.Errorf("no certificate for %s yet: %w", c.cfg.ID, c.lastErr)
	}
}
