// Package podcontract parses the per-pod mesh settings carried in
// config.plexus.dev/* annotations into a validated Config; it has no
// Kubernetes dependency so the plugin and the sidecar can share it.
package podcontract

import (
	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Fixed defaults from ARCHITECTURE.md (§2).
const (
	DefaultInboundPort  uint16 = 4143
	DefaultOutboundPort uint16 = 4140
	DefaultAdminPort    uint16 = 4191
	DefaultProxyUID     uint32 = 2102
	DefaultProxyGID     uint32 = 2102
)

// AnnotationPrefix is the prefix of every per-pod setting.
const AnnotationPrefix = "config.plexus.dev/"

// Annotation names (full keys) the plugin and the proxy both honour.
const (
	AnnotationSkipInboundPorts    = AnnotationPrefix + "skip-inbound-ports"
	AnnotationSkipOutboundPorts   = AnnotationPrefix + "skip-outbound-ports"
	AnnotationSkipInboundSubnets  = AnnotationPrefix + "skip-inbound-subnets"
	AnnotationSkipOutboundSubnets = AnnotationPrefix + "skip-outbound-subnets"
	AnnotationOpaquePorts         = AnnotationPrefix + "opaque-ports"
	AnnotationProxyUID            = AnnotationPrefix + "proxy-uid"
	AnnotationInboundPort         = AnnotationPrefix + "inbound-port"
	AnnotationOutboundPort        = AnnotationPrefix + "outbound-port"
	AnnotationAdminPort           = AnnotationPrefix + "admin-port"
)

// Config is the redirect-relevant configuration of one pod.
type Config struct {
	InboundPort  uint16
	OutboundPort uint16
	AdminPort    uint16
	ProxyUID     uint32
	ProxyGID     uint32

	SkipInboundPorts    []PortRange
	SkipOutboundPorts   []PortRange
	SkipInboundSubnets  []netip.Prefix // source CIDRs
	SkipOutboundSubnets []netip.Prefix // destination CIDRs
	// OpaquePorts is parsed and validated for the proxy; it does not change
	// the redirect rules (opaque traffic is still redirected).
	OpaquePorts []PortRange
	// InboundSource are the loopback addresses, at most one per IP family,
	// the proxy's inbound side dials the application from
	// (EnvInboundSource; not an annotation). For a family that has one,
	// the rules RETURN connections from it on lo and send the proxy's
	// other connections to the pod's own addresses (a pod calling itself
	// through a Service) to the inbound chain. Empty: a proxy that does
	// not bind, and neither rule.
	InboundSource []netip.Addr
}

// Defaults returns the configuration of a pod with no annotations.
func Defaults() Config {
	return Config{
		InboundPort:  DefaultInboundPort,
		OutboundPort: DefaultOutboundPort,
		AdminPort:    DefaultAdminPort,
		ProxyUID:     DefaultProxyUID,
		ProxyGID:     DefaultProxyGID,
	}
}

// Validate reports the first inconsistency in c.
func (c Config) Validate() error {
	ports := map[string]uint16{"inbound port": c.InboundPort, "outbound port": c.OutboundPort, "admin port": c.AdminPort}
	seen := map[uint16]string{}
	for _, name := range []string{"inbound port", "outbound port", "admin port"} {
		p := ports[name]
		if p == 0 {
			return fmt.Errorf("%s must be set (1-65535)", name)
		}
		if other, ok := seen[p]; ok {
			return fmt.Errorf("%s and %s are both %d", other, name, p)
		}
		seen[p] = name
	}
	if c.ProxyUID == 0 {
		return errors.New("proxy UID must not be 0 (root traffic would bypass the proxy)")
	}
	if c.ProxyGID == 0 {
		return errors.New("proxy GID must not be 0 (root traffic would bypass the proxy)")
	}
	for _, r := range c.SkipInboundPorts {
		if r.Contains(c.InboundPort) {
			return fmt.Errorf("skip-inbound-ports %s contains the proxy inbound port %d", r, c.InboundPort)
		}
	}
	for _, list := range [][]netip.Prefix{c.SkipInboundSubnets, c.SkipOutboundSubnets} {
		for _, p := range list {
			if !p.IsValid() {
				return fmt.Errorf("invalid subnet %v", p)
			}
		}
	}
	return validInboundSource(c.InboundSource)
}

// AnnotationError names the annotation whose value could not be used.
type AnnotationError struct {
	Annotation string
	Value      string
	Err        error
}

func (e *AnnotationError) Error() string {
	return fmt.Sprintf("annotation %s=%q: %v", e.Annotation, e.Value, e.Err)
}

func (e *AnnotationError) Unwrap() error { return e.Err }

// FromAnnotations overlays the pod's annotations on base. Skip lists and
// opaque ports are added to those of base (cluster-wide lists always apply);
// ports and the proxy UID replace base's. The result is validated. A
// malformed value returns an *AnnotationError.
func FromAnnotations(base Config, annotations map[string]string) (Config, error) {
	c := base
	c.SkipInboundPorts = append([]PortRange(nil), base.SkipInboundPorts...)
	c.SkipOutboundPorts = append([]PortRange(nil), base.SkipOutboundPorts...)
	c.OpaquePorts = append([]PortRange(nil), base.OpaquePorts...)
	c.SkipInboundSubnets = append([]netip.Prefix(nil), base.SkipInboundSubnets...)
	c.SkipOutboundSubnets = append([]netip.Prefix(nil), base.SkipOutboundSubnets...)

	a := annotations
	for _, err := range []error{
		overlay(a, AnnotationSkipInboundPorts, ParsePorts, appendTo(&c.SkipInboundPorts)),
		overlay(a, AnnotationSkipOutboundPorts, ParsePorts, appendTo(&c.SkipOutboundPorts)),
		overlay(a, AnnotationOpaquePorts, ParsePorts, appendTo(&c.OpaquePorts)),
		overlay(a, AnnotationSkipInboundSubnets, ParseSubnets, appendTo(&c.SkipInboundSubnets)),
		overlay(a, AnnotationSkipOutboundSubnets, ParseSubnets, appendTo(&c.SkipOutboundSubnets)),
		overlay(a, AnnotationInboundPort, ParsePort, setTo(&c.InboundPort)),
		overlay(a, AnnotationOutboundPort, ParsePort, setTo(&c.OutboundPort)),
		overlay(a, AnnotationAdminPort, ParsePort, setTo(&c.AdminPort)),
		overlay(a, AnnotationProxyUID, parseUID, setTo(&c.ProxyUID)),
	} {
		if err != nil {
			return Config{}, err // the first malformed annotation, in this order
		}
	}
	if err := c.Validate(); err != nil {
		return Config{}, fmt.Errorf("pod configuration from %s* annotations: %w", AnnotationPrefix, err)
	}
	return c, nil
}

// overlay parses annotation name, when the pod has it, and hands the
// value to set; a malformed value is an *AnnotationError.
func overlay[T any](annotations map[string]string, name string, parse func(string) (T, error), set func(T)) error {
	v, ok := annotations[name]
	if !ok {
		return nil
	}
	x, err := parse(v)
	if err != nil {
		return &AnnotationError{Annotation: name, Value: v, Err: err}
	}
	set(x)
	return nil
}

func appendTo[T any](dst *[]T) func([]T) { return func(x []T) { *dst = append(*dst, x...) } }
func setTo[T any](dst *T) func(T)        { return func(x T) { *dst = x } }

// parseUID parses the proxy UID annotation: a non-zero number.
func parseUID(v string) (uint32, error) {
	uid, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
	if err != nil || uid == 0 {
		return 0, errors.New("want a non-zero numeric UID")
	}
	return uint32(uid), nil
}
