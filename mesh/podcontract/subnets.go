package podcontract

import (
	"fmt"
	"net/netip"
	"strings"
)

// ParseSubnets parses a comma-separated list of CIDRs such as
// "10.0.0.0/8,fd00::/8". A bare address is taken as a single-host prefix
// (/32 or /128). Host bits are cleared, so "10.1.2.3/8" becomes 10.0.0.0/8.
func ParseSubnets(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for item := range strings.SplitSeq(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		var p netip.Prefix
		if strings.Contains(item, "/") {
			var err error
			if p, err = netip.ParsePrefix(item); err != nil {
				return nil, fmt.Errorf("%q is not a CIDR: %w", item, err)
			}
		} else {
			a, err := netip.ParseAddr(item)
			if err != nil {
				return nil, fmt.Errorf("%q is neither a CIDR nor an address: %w", item, err)
			}
			if a.Zone() != "" {
				return nil, fmt.Errorf("%q: zoned addresses are not allowed", item)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		if p.Addr().Zone() != "" {
			return nil, fmt.Errorf("%q: zoned addresses are not allowed", item)
		}
		if p.Addr().Is4In6() {
			return nil, fmt.Errorf("%q: write IPv4-mapped addresses in their IPv4 form", item)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
