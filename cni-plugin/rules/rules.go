// Package rules models the nat-table redirect rules of a meshed pod as data
// and renders them to iptables-restore input; the DEL script and the CHECK
// comparison are derived from the same model.
package rules

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// Chain names and hook points fixed by ARCHITECTURE.md (§2, §3).
const (
	ChainInbound  = "PLEXUS_INBOUND"
	ChainOutput   = "PLEXUS_OUTPUT"
	HookInbound   = "PREROUTING"
	HookOutput    = "OUTPUT"
	CommentPrefix = "plexus/"
)

// Family is an IP family; IPv4 rules go to iptables, IPv6 to ip6tables.
type Family int

// The two families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// Rule is one nat-table rule. Its fields are kept in the order iptables-save
// prints them, so Line is both valid restore input and the canonical form
// that CHECK compares against.
type Rule struct {
	Chain   string
	Match   []string // e.g. "-p", "tcp", "-m", "tcp", "--dport", "4191"
	Comment string   // without the "plexus/" prefix
	Target  []string // e.g. "REDIRECT", "--to-ports", "4143"
}

// Spec is the rule without "-A <chain>".
func (r Rule) Spec() string {
	var b strings.Builder
	for _, m := range r.Match {
		b.WriteString(m)
		b.WriteByte(' ')
	}
	fmt.Fprintf(&b, "-m comment --comment %q -j %s", CommentPrefix+r.Comment, strings.Join(r.Target, " "))
	return b.String()
}

// Line is the rule as iptables-save prints it: "-A <chain> <spec>".
func (r Rule) Line() string {
	return "-A " + r.Chain + " " + r.Spec()
}

// RuleSet is everything plexus writes into one family's nat table.
type RuleSet struct {
	Family Family
	Hooks  []Rule // rules in PREROUTING/OUTPUT that jump to our chains
	Rules  []Rule // the contents of our chains, in order
}

// Chains are the chains a RuleSet owns, in a fixed order.
func Chains() []string { return []string{ChainInbound, ChainOutput} }

// Build derives the rule set for one family from a validated pod config.
// For IPv4 only IPv4 skip subnets apply, for IPv6 only IPv6 ones.
func Build(c podcontract.Config, fam Family) (RuleSet, error) {
	if fam != IPv4 && fam != IPv6 {
		return RuleSet{}, fmt.Errorf("unknown IP family %d", int(fam))
	}
	if err := c.Validate(); err != nil {
		return RuleSet{}, fmt.Errorf("building %s rules: %w", fam, err)
	}
	tcp := []string{"-p", "tcp"}
	rs := RuleSet{Family: fam}
	rs.Hooks = []Rule{
		{Chain: HookInbound, Match: tcp, Comment: "inbound-hook", Target: []string{ChainInbound}},
		{Chain: HookOutput, Match: tcp, Comment: "outbound-hook", Target: []string{ChainOutput}},
	}
	ret := []string{"RETURN"}
	in := func(match []string, comment string, target []string) {
		rs.Rules = append(rs.Rules, Rule{Chain: ChainInbound, Match: match, Comment: comment, Target: target})
	}
	out := func(match []string, comment string, target []string) {
		rs.Rules = append(rs.Rules, Rule{Chain: ChainOutput, Match: match, Comment: comment, Target: target})
	}

	in(dport(PortRangeOf(c.AdminPort)), "admin-port", ret)
	for _, r := range c.SkipInboundPorts {
		in(dport(r), "skip-inbound-ports", ret)
	}
	for _, p := range familyPrefixes(c.SkipInboundSubnets, fam) {
		in([]string{"-s", p.String(), "-p", "tcp"}, "skip-inbound-subnets", ret)
	}
	in(tcp, "redirect-inbound", []string{"REDIRECT", "--to-ports", strconv.Itoa(int(c.InboundPort))})

	uid := strconv.FormatUint(uint64(c.ProxyUID), 10)
	if src, ok := c.InboundSourceOf(fam == IPv6); ok {
		// A pod calling itself through a Service: its proxy's connection
		// to its own address leaves by lo and never passes PREROUTING, so
		// it is sent through the inbound chain here (the admin port and
		// inbound skips return as for any caller). The inbound side's own
		// dials to the application are bound to src, and return first.
		out([]string{"-s", netip.PrefixFrom(src, src.BitLen()).String(), "-o", "lo"}, "inbound-to-app", ret)
		out([]string{"!", "-d", loopback(fam).String(), "-o", "lo", "-m", "owner", "--uid-owner", uid}, "self-call", []string{ChainInbound})
	}
	out([]string{"-m", "owner", "--uid-owner", uid}, "proxy-uid", ret)
	out([]string{"-m", "owner", "--gid-owner", strconv.FormatUint(uint64(c.ProxyGID), 10)}, "proxy-gid", ret)
	out([]string{"-o", "lo"}, "loopback", ret)
	for _, r := range c.SkipOutboundPorts {
		out(dport(r), "skip-outbound-ports", ret)
	}
	for _, p := range familyPrefixes(c.SkipOutboundSubnets, fam) {
		out([]string{"-d", p.String(), "-p", "tcp"}, "skip-outbound-subnets", ret)
	}
	out(tcp, "redirect-outbound", []string{"REDIRECT", "--to-ports", strconv.Itoa(int(c.OutboundPort))})
	return rs, nil
}

// loopback is the family's loopback network.
func loopback(fam Family) netip.Prefix {
	if fam == IPv6 {
		return netip.MustParsePrefix("::1/128")
	}
	return netip.MustParsePrefix("127.0.0.0/8")
}

// PortRangeOf is the range holding just port p.
func PortRangeOf(p uint16) podcontract.PortRange { return podcontract.PortRange{First: p, Last: p} }

func dport(r podcontract.PortRange) []string {
	v := strconv.Itoa(int(r.First))
	if r.Last != r.First {
		v += ":" + strconv.Itoa(int(r.Last))
	}
	return []string{"-p", "tcp", "-m", "tcp", "--dport", v}
}

func familyPrefixes(ps []netip.Prefix, fam Family) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range ps {
		if p.Addr().Is4() == (fam == IPv4) {
			out = append(out, p)
		}
	}
	return out
}
