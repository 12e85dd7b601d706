// Package config holds the plexus-proxy configuration read from PLEXUS_PROXY_* environment variables.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"
)

// Environment variable names read by FromEnv.
const (
	EnvInboundPort     = "PLEXUS_PROXY_INBOUND_PORT"
	EnvOutboundPort    = "PLEXUS_PROXY_OUTBOUND_PORT"
	EnvAdminPort       = "PLEXUS_PROXY_ADMIN_PORT"
	EnvOpaquePorts     = "PLEXUS_PROXY_OPAQUE_PORTS"
	EnvDetectTimeout   = "PLEXUS_PROXY_DETECT_TIMEOUT"
	EnvIdleTimeout     = "PLEXUS_PROXY_IDLE_TIMEOUT"
	EnvShutdownGrace   = "PLEXUS_PROXY_SHUTDOWN_GRACE"
	EnvLogLevel        = "PLEXUS_PROXY_LOG_LEVEL"
	EnvIdentityAddr    = "PLEXUS_PROXY_IDENTITY_ADDR"
	EnvDestinationAddr = "PLEXUS_PROXY_DESTINATION_ADDR"
	EnvRedirectProbe   = "PLEXUS_PROXY_REDIRECT_PROBE_PORT"
)

// Defaults, matching DESIGN.md §2 and Linkerd's defaults where DESIGN is silent.
const (
	DefaultInboundPort   = 4143
	DefaultOutboundPort  = 4140
	DefaultAdminPort     = 4191
	DefaultDetectTimeout = 10 * time.Second
	DefaultIdleTimeout   = time.Hour
	DefaultShutdownGrace = 20 * time.Second
)

// DefaultOpaquePorts are the server-speaks-first ports that skip protocol detection.
func DefaultOpaquePorts() PortSet {
	var s PortSet
	for _, p := range []uint16{25, 587, 3306, 4444, 5432, 6379, 9300, 11211} {
		s.Add(p)
	}
	return s
}

// Config is the complete proxy configuration.
type Config struct {
	InboundPort   uint16
	OutboundPort  uint16
	AdminPort     uint16
	OpaquePorts   PortSet
	DetectTimeout time.Duration
	IdleTimeout   time.Duration
	ShutdownGrace time.Duration
	LogLevel      slog.Level
	// RedirectProbePort, when not 0, is a port nothing listens on: an
	// inbound connection to it can only reach the proxy through the
	// inbound REDIRECT rule, so the proxy answers it with the admin
	// handler and only reports ready once one has arrived.
	RedirectProbePort uint16
	// IdentityAddr and DestinationAddr name control-plane services; this
	// build supports neither yet, so Validate rejects a non-empty value.
	IdentityAddr    string
	DestinationAddr string
}

// Default returns the configuration used when no variable is set.
func Default() Config {
	return Config{
		InboundPort:   DefaultInboundPort,
		OutboundPort:  DefaultOutboundPort,
		AdminPort:     DefaultAdminPort,
		OpaquePorts:   DefaultOpaquePorts(),
		DetectTimeout: DefaultDetectTimeout,
		IdleTimeout:   DefaultIdleTimeout,
		ShutdownGrace: DefaultShutdownGrace,
		LogLevel:      slog.LevelInfo,
	}
}

// FromEnv builds a Config from lookup (os.LookupEnv in production). Unset
// or empty variables keep their defaults; every malformed value is
// reported, each error naming its variable.
func FromEnv(lookup func(string) (string, bool)) (Config, error) {
	c := Default()
	var errs []error
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		v = strings.TrimSpace(v)
		return v, ok && v != ""
	}
	port := func(name string, dst *uint16) {
		if v, ok := get(name); ok {
			p, err := parsePort(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
				return
			}
			*dst = p
		}
	}
	dur := func(name string, dst *time.Duration) {
		if v, ok := get(name); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
				return
			}
			*dst = d
		}
	}
	port(EnvInboundPort, &c.InboundPort)
	port(EnvOutboundPort, &c.OutboundPort)
	port(EnvAdminPort, &c.AdminPort)
	port(EnvRedirectProbe, &c.RedirectProbePort)
	if v, ok := lookup(EnvOpaquePorts); ok {
		// Set but empty means "no opaque ports"; unset keeps the defaults.
		s, err := ParsePortSet(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", EnvOpaquePorts, v, err))
		} else {
			c.OpaquePorts = s
		}
	}
	dur(EnvDetectTimeout, &c.DetectTimeout)
	dur(EnvIdleTimeout, &c.IdleTimeout)
	dur(EnvShutdownGrace, &c.ShutdownGrace)
	if v, ok := get(EnvLogLevel); ok {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want debug, info, warn or error: %w", EnvLogLevel, v, err))
		}
	}
	c.IdentityAddr, _ = get(EnvIdentityAddr)
	c.DestinationAddr, _ = get(EnvDestinationAddr)
	return c, errors.Join(errs...)
}

// Validate reports every inconsistency in c, naming the variable involved.
func (c Config) Validate() error {
	var errs []error
	ports := []struct {
		name string
		v    uint16
	}{{EnvInboundPort, c.InboundPort}, {EnvOutboundPort, c.OutboundPort}, {EnvAdminPort, c.AdminPort}}
	for i, p := range ports {
		if p.v == 0 {
			errs = append(errs, fmt.Errorf("%s: port must be in 1-65535", p.name))
			continue
		}
		for _, q := range ports[:i] {
			if q.v == p.v {
				errs = append(errs, fmt.Errorf("%s and %s are both %d: the three proxy ports must differ", q.name, p.name, p.v))
			}
		}
	}
	if c.RedirectProbePort != 0 {
		for _, p := range ports {
			if p.v == c.RedirectProbePort {
				errs = append(errs, fmt.Errorf("%s equals %s (%d): the probe port must be one nothing listens on", EnvRedirectProbe, p.name, p.v))
			}
		}
	}
	if c.DetectTimeout <= 0 {
		errs = append(errs, fmt.Errorf("%s: must be positive, got %s", EnvDetectTimeout, c.DetectTimeout))
	}
	if c.IdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("%s: must be positive, got %s", EnvIdleTimeout, c.IdleTimeout))
	}
	if c.ShutdownGrace < 0 {
		errs = append(errs, fmt.Errorf("%s: must not be negative, got %s", EnvShutdownGrace, c.ShutdownGrace))
	}
	if c.IdentityAddr != "" {
		errs = append(errs, fmt.Errorf("%s: identity (mTLS) is not implemented in this build; unset it", EnvIdentityAddr))
	}
	if c.DestinationAddr != "" {
		errs = append(errs, fmt.Errorf("%s: destination discovery is not implemented in this build; unset it", EnvDestinationAddr))
	}
	return errors.Join(errs...)
}

func parsePort(s string) (uint16, error) {
	n, err := strconv.ParseUint(s, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("not a port number in 1-65535")
	}
	return uint16(n), nil
}
