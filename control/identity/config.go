// Package identity is the mesh's certificate authority service: it checks a
// workload's service-account token with a TokenReview and signs a leaf
// certificate for exactly the SPIFFE identity the token proves, with an
// issuer loaded (and hot-reloaded) from a Kubernetes Secret.
package identity

import (
	"errors"
	"fmt"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/pki"
)

// Defaults (ARCHITECTURE.md §2 and the issue 6 PKI contract).
const (
	DefaultAudience       = "identity.plexus.dev"
	DefaultSecretName     = "plexus-identity-issuer"
	DefaultServiceAccount = "plexus-identity"
	DefaultCertLifetime   = pki.DefaultLeafLifetime
	DefaultClockSkew      = pki.DefaultClockSkew
)

// Keys of the issuer Secret (a kubernetes.io/tls Secret plus the anchors).
const (
	SecretAnchorsKey = "ca.crt"  // trust anchors, PEM, one or more
	SecretCertKey    = "tls.crt" // issuer certificate PEM, then any further intermediates
	SecretKeyKey     = "tls.key" // issuer private key PEM
)

// Config configures the identity service. Zero durations, audience, secret
// name and service account mean their defaults (see WithDefaults).
type Config struct {
	TrustDomain    string        // identities outside it are refused
	Namespace      string        // namespace of the issuer Secret and of the service itself
	SecretName     string        // the issuer Secret
	ServiceAccount string        // the service's own service account, for its serving certificate
	CertLifetime   time.Duration // lifetime of issued leaves
	ClockSkew      time.Duration // NotBefore backdating
	Audience       string        // the token audience required
	// ReservedNamespaces: their service accounts are certified only
	// while an extension declares them (reserved.go); nil: none.
	ReservedNamespaces []string
}

// WithDefaults returns c with zero fields set to their defaults.
func (c Config) WithDefaults() Config {
	if c.SecretName == "" {
		c.SecretName = DefaultSecretName
	}
	if c.ServiceAccount == "" {
		c.ServiceAccount = DefaultServiceAccount
	}
	if c.CertLifetime == 0 {
		c.CertLifetime = DefaultCertLifetime
	}
	if c.ClockSkew == 0 {
		c.ClockSkew = DefaultClockSkew
	}
	if c.Audience == "" {
		c.Audience = DefaultAudience
	}
	return c
}

// Validate reports what is wrong with c (after WithDefaults).
func (c Config) Validate() error {
	var errs []error
	for name, v := range map[string]string{
		"trust domain": c.TrustDomain, "namespace": c.Namespace, "secret name": c.SecretName,
		"service account": c.ServiceAccount, "audience": c.Audience,
	} {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is empty", name))
		}
	}
	if c.CertLifetime <= 0 {
		errs = append(errs, fmt.Errorf("certificate lifetime %s must be positive", c.CertLifetime))
	}
	if c.ClockSkew < 0 || (c.CertLifetime > 0 && c.ClockSkew >= c.CertLifetime) {
		errs = append(errs, fmt.Errorf("clock skew %s must be non-negative and shorter than the certificate lifetime", c.ClockSkew))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("identity config: %w", err)
	}
	return nil
}
