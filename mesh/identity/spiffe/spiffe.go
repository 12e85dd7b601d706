// Package spiffe parses, formats and verifies Plexus workload identities:
// SPIFFE IDs of the form spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>.
package spiffe

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// DefaultTrustDomain is the trust domain when none is configured (ARCHITECTURE.md §2).
const DefaultTrustDomain = "cluster.local"

// ID is a workload identity.
type ID struct {
	TrustDomain    string
	Namespace      string
	ServiceAccount string
}

// New returns the identity of service account sa in namespace ns.
func New(trustDomain, ns, sa string) ID {
	return ID{TrustDomain: trustDomain, Namespace: ns, ServiceAccount: sa}
}

// String formats id as a SPIFFE URI.
func (id ID) String() string {
	return "spiffe://" + id.TrustDomain + "/ns/" + id.Namespace + "/sa/" + id.ServiceAccount
}

// URL returns id as a URL, for a certificate's URI SAN.
func (id ID) URL() *url.URL {
	return &url.URL{Scheme: "spiffe", Host: id.TrustDomain, Path: "/ns/" + id.Namespace + "/sa/" + id.ServiceAccount}
}

// IsZero reports whether id is the zero ID.
func (id ID) IsZero() bool { return id == ID{} }

// Parse parses a SPIFFE URI of the Plexus form, naming what is wrong.
func Parse(s string) (ID, error) {
	u, err := url.Parse(s)
	if err != nil {
		return ID{}, fmt.Errorf("identity %q: %w", s, err)
	}
	return FromURL(u)
}

// FromURL is Parse for an already parsed URI (a certificate's URI SAN).
func FromURL(u *url.URL) (ID, error) {
	s := u.String()
	switch {
	case u.Scheme != "spiffe":
		return ID{}, fmt.Errorf("identity %q: scheme must be spiffe", s)
	case u.Host == "" || u.User != nil || u.Port() != "":
		return ID{}, fmt.Errorf("identity %q: needs a trust domain and nothing else before the path", s)
	case u.RawQuery != "" || u.Fragment != "" || u.Opaque != "":
		return ID{}, fmt.Errorf("identity %q: must not have a query or fragment", s)
	}
	parts := strings.Split(strings.TrimPrefix(u.Path, "/"), "/")
	if len(parts) != 4 || parts[0] != "ns" || parts[2] != "sa" || parts[1] == "" || parts[3] == "" {
		return ID{}, fmt.Errorf("identity %q: path must be /ns/<namespace>/sa/<service-account>", s)
	}
	return ID{TrustDomain: u.Host, Namespace: parts[1], ServiceAccount: parts[3]}, nil
}

// FromCert returns the identity a certificate names: it must carry exactly
// one URI SAN and no DNS, IP or e-mail SANs.
func FromCert(cert *x509.Certificate) (ID, error) {
	switch {
	case len(cert.URIs) != 1:
		return ID{}, fmt.Errorf("certificate has %d URI SANs, want exactly one SPIFFE ID", len(cert.URIs))
	case len(cert.DNSNames) != 0 || len(cert.IPAddresses) != 0 || len(cert.EmailAddresses) != 0:
		return ID{}, errors.New("certificate has DNS, IP or e-mail SANs besides its SPIFFE ID")
	}
	return FromURL(cert.URIs[0])
}

// ErrMismatch is wrapped by VerifyPeer when the peer proves another identity.
var ErrMismatch = errors.New("peer identity mismatch")

// VerifyPeer checks that the leaf of a verified chain (as in
// tls.Config.VerifyPeerCertificate after the standard verification)
// names want. It returns the identity it found.
func VerifyPeer(verifiedChains [][]*x509.Certificate, want ID) (ID, error) {
	if len(verifiedChains) == 0 || len(verifiedChains[0]) == 0 {
		return ID{}, errors.New("peer presented no verified certificate")
	}
	got, err := FromCert(verifiedChains[0][0])
	if err != nil {
		return ID{}, fmt.Errorf("peer certificate: %w", err)
	}
	if got != want {
		return got, fmt.Errorf("%w: want %s, got %s", ErrMismatch, want, got)
	}
	return got, nil
}

// MarshalText makes an ID print as its URI in logs and JSON.
func (id ID) MarshalText() ([]byte, error) { return []byte(id.String()), nil }
