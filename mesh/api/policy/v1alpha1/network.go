package policyv1alpha1

import (
	"fmt"
	"net/netip"
)

// ParsePrefix reads a Network's cidr or exception: a CIDR, or one address
// as a full-length prefix. Host bits are cleared, as in matching. Like the
// API server's isCIDR and isIP, it refuses zones and IPv4-mapped IPv6.
func ParsePrefix(s string) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(s)
	if err != nil {
		a, aerr := netip.ParseAddr(s)
		if aerr != nil {
			return netip.Prefix{}, fmt.Errorf("%q is neither a CIDR nor an IP address", s)
		}
		if a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q: an address with a zone is no network", s)
		}
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if p.Addr().Is4In6() {
		return netip.Prefix{}, fmt.Errorf("%q: an IPv4-mapped IPv6 address is not allowed; write it as IPv4", s)
	}
	return p.Masked(), nil
}
