package pki

import (
	"crypto/x509"
	"fmt"
	"strings"
)

// CheckTrustDomain returns an error naming the constraints when the
// certificates of chain (an issuer's, up to its anchor) forbid
// identities of trust domain td: their URI name constraints, as Go's
// verification applies them to a SPIFFE ID's host.
func CheckTrustDomain(chain []*x509.Certificate, td string) error {
	for _, c := range chain {
		permitted := len(c.PermittedURIDomains) == 0
		for _, d := range c.PermittedURIDomains {
			permitted = permitted || matchDomain(td, d)
		}
		excluded := false
		for _, d := range c.ExcludedURIDomains {
			excluded = excluded || matchDomain(td, d)
		}
		if !permitted || excluded {
			return fmt.Errorf("certificate %q may sign identities of trust domains %v (not %v), not of %s",
				c.Subject.CommonName, c.PermittedURIDomains, c.ExcludedURIDomains, td)
		}
	}
	return nil
}

// matchDomain reports whether host is within constraint: the domain
// itself and its subdomains, or, for ".domain", its subdomains only.
func matchDomain(host, constraint string) bool {
	host, constraint = strings.ToLower(host), strings.ToLower(constraint)
	if sub, ok := strings.CutPrefix(constraint, "."); ok {
		return strings.HasSuffix(host, "."+sub)
	}
	return host == constraint || strings.HasSuffix(host, "."+constraint)
}
