package config

import (
	"fmt"
	"strings"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// The tap server (ARCHITECTURE.md §10): port 4190, served with identity only, to
// the tap service's identity alone.
const (
	EnvTapPort      = "PLEXUS_PROXY_TAP_PORT"
	EnvTapNamespace = "PLEXUS_PROXY_TAP_NAMESPACE"

	DefaultTapPort      = 4190
	DefaultTapNamespace = "plexus-viz"
	// TapServiceAccount is the tap service's service account.
	TapServiceAccount = "plexus-tap"
)

// TapID is the only identity the tap server serves.
func (c Config) TapID() spiffe.ID {
	return spiffe.New(c.TrustDomain, c.TapNamespace, TapServiceAccount)
}

// tapFromEnv reads the tap variables; "off" as the port disables the tap
// server.
func (c *Config) tapFromEnv(get func(string) (string, bool)) error {
	if v, ok := get(EnvTapPort); ok {
		if strings.EqualFold(v, "off") {
			c.TapPort = 0
		} else {
			p, err := parsePort(v)
			if err != nil {
				return fmt.Errorf("%s=%q: %w (or off)", EnvTapPort, v, err)
			}
			c.TapPort = p
		}
	}
	if v, ok := get(EnvTapNamespace); ok {
		c.TapNamespace = v
	}
	return nil
}

// validateTap reports a tap port that collides with another proxy port.
func (c Config) validateTap() error {
	if c.TapPort == 0 {
		return nil
	}
	for _, p := range []struct {
		name string
		v    uint16
	}{{EnvInboundPort, c.InboundPort}, {EnvOutboundPort, c.OutboundPort}, {EnvAdminPort, c.AdminPort}, {EnvRedirectProbe, c.RedirectProbePort}} {
		if p.v == c.TapPort {
			return fmt.Errorf("%s equals %s (%d): the tap port must differ from the proxy's other ports", EnvTapPort, p.name, p.v)
		}
	}
	return nil
}
