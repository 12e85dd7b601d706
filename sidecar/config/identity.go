package config

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"

	"github.com/plexus-mesh/plexus/mesh/identity/pki"
	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// The proxy's identity: who it is, whom it trusts, and the control-plane
// identities it must see proven.

// ContextToken is what the proxy tells destination of itself with every
// request: its namespace (which routes it sees) and node (its zone).
func (c Config) ContextToken() string {
	b, _ := json.Marshal(struct {
		NS       string `json:"ns"`
		NodeName string `json:"nodeName,omitempty"`
	}{c.PodNamespace, c.NodeName})
	return string(b)
}

// IdentityEnabled reports whether the proxy has a workload identity (mTLS).
func (c Config) IdentityEnabled() bool { return c.IdentityAddr != "" }

// ID is the proxy's own identity.
func (c Config) ID() spiffe.ID { return spiffe.New(c.TrustDomain, c.PodNamespace, c.ServiceAccount) }

// IdentityServerID is the identity the identity service must prove.
func (c Config) IdentityServerID() spiffe.ID {
	return spiffe.New(c.TrustDomain, c.ControlNamespace, IdentityServiceAccount)
}

// DestinationServerID is the identity the destination service must prove.
func (c Config) DestinationServerID() spiffe.ID {
	return spiffe.New(c.TrustDomain, c.ControlNamespace, DestinationServiceAccount)
}

// TrustAnchors parses TrustAnchorsPEM: one or more CA certificates in
// CERTIFICATE blocks and nothing else.
func (c Config) TrustAnchors() (*x509.CertPool, error) {
	certs, err := pki.ParseCerts([]byte(c.TrustAnchorsPEM))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvTrustAnchors, err)
	}
	pool := x509.NewCertPool()
	for i, cert := range certs {
		if !cert.IsCA {
			return nil, fmt.Errorf("%s: certificate %d (%s) is not a CA", EnvTrustAnchors, i+1, cert.Subject)
		}
		pool.AddCert(cert)
	}
	return pool, nil
}

// validateIdentity checks the identity and destination settings.
func (c Config) validateIdentity() []error {
	var errs []error
	hostPort := func(name, v string) {
		if v == "" {
			return
		}
		host, port, err := net.SplitHostPort(v)
		if err != nil || host == "" {
			errs = append(errs, fmt.Errorf("%s=%q: want host:port", name, v))
			return
		}
		if _, err := parsePort(port); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
		}
	}
	hostPort(EnvIdentityAddr, c.IdentityAddr)
	hostPort(EnvDestinationAddr, c.DestinationAddr)
	switch c.InboundPolicy {
	case PolicyPermissive, PolicyMTLS:
	default:
		errs = append(errs, fmt.Errorf("%s=%q: want %s or %s", EnvInboundPolicy, c.InboundPolicy, PolicyPermissive, PolicyMTLS))
	}
	if c.IdentityAddr == "" {
		if c.DestinationAddr != "" {
			errs = append(errs, fmt.Errorf("%s is set but %s is not: the proxy talks to destination over mTLS, which needs an identity", EnvDestinationAddr, EnvIdentityAddr))
		}
		if c.InboundPolicy == PolicyMTLS {
			errs = append(errs, fmt.Errorf("%s=%s needs %s: without an identity the proxy cannot accept mTLS", EnvInboundPolicy, PolicyMTLS, EnvIdentityAddr))
		}
		return errs
	}
	need := func(name, v string) {
		if v == "" {
			errs = append(errs, fmt.Errorf("%s is required when %s is set", name, EnvIdentityAddr))
		}
	}
	need(EnvPodNamespace, c.PodNamespace)
	need(EnvServiceAccount, c.ServiceAccount)
	need(EnvTrustDomain, c.TrustDomain)
	need(EnvTokenFile, c.TokenFile)
	need(EnvControlNS, c.ControlNamespace)
	if c.TrustAnchorsPEM == "" {
		errs = append(errs, fmt.Errorf("%s is required when %s is set", EnvTrustAnchors, EnvIdentityAddr))
	} else if _, err := c.TrustAnchors(); err != nil {
		errs = append(errs, err)
	}
	if c.PodNamespace != "" && c.ServiceAccount != "" && c.TrustDomain != "" {
		if _, err := spiffe.Parse(c.ID().String()); err != nil {
			errs = append(errs, fmt.Errorf("%s/%s/%s: %w", EnvTrustDomain, EnvPodNamespace, EnvServiceAccount, err))
		}
	}
	return errs
}
