package podcontract

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// EnvInboundSource is the environment variable of the plexus-proxy
// container naming the source addresses its inbound side dials the
// application from: one loopback address per IP family, comma-separated
// (DefaultInboundSource). The injector sets it on every proxy that binds
// them; the proxy reads it, and so do the CNI plugin and the node agent's
// repair, which write the pod's self-call rules (rules.Build) only when it
// is present. A pod whose proxy predates it keeps the rules it had: with
// them, an inbound dial that is not bound would be taken for a self-call
// and loop.
const EnvInboundSource = "PLEXUS_PROXY_INBOUND_SOURCE"

// DefaultInboundSource is the value the injector sets: 127.0.0.6 as
// Istio's inbound passthrough uses, and ::1, which (unlike Istio's ::6)
// needs no address added to lo.
const DefaultInboundSource = "127.0.0.6,::1"

// ParseInboundSource reads a value of EnvInboundSource: at most one
// loopback address per IP family. An empty value is none.
func ParseInboundSource(v string) ([]netip.Addr, error) {
	var out []netip.Addr
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return nil, fmt.Errorf("%s=%q: %w", EnvInboundSource, v, err)
		}
		out = append(out, a)
	}
	if err := validInboundSource(out); err != nil {
		return nil, fmt.Errorf("%s=%q: %w", EnvInboundSource, v, err)
	}
	return out, nil
}

// validInboundSource checks the addresses of Config.InboundSource.
func validInboundSource(addrs []netip.Addr) error {
	var v4, v6 bool
	for _, a := range addrs {
		switch {
		case !a.IsValid():
			return errors.New("invalid inbound source address")
		case a.Zone() != "" || a.Is4In6() || !a.IsLoopback():
			// Another address would leave the pod or need one added to lo
			// (Istio's ::6), which the plugin neither adds nor checks.
			return fmt.Errorf("inbound source %s is not a loopback address (127.0.0.0/8 or ::1)", a)
		case a.Is4() && v4, a.Is6() && v6:
			return fmt.Errorf("more than one inbound source address of the family of %s", a)
		}
		v4, v6 = v4 || a.Is4(), v6 || a.Is6()
	}
	return nil
}

// InboundSourceOf returns c's inbound source address of one IP family
// (ipv6 false: IPv4), and whether it has one.
func (c Config) InboundSourceOf(ipv6 bool) (netip.Addr, bool) {
	for _, a := range c.InboundSource {
		if a.Is6() == ipv6 {
			return a, true
		}
	}
	return netip.Addr{}, false
}
