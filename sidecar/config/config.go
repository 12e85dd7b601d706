// Package config holds the plexus-proxy configuration read from PLEXUS_PROXY_* environment variables.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
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
	EnvTrustDomain     = "PLEXUS_PROXY_TRUST_DOMAIN"
	EnvPodNamespace    = "PLEXUS_PROXY_POD_NAMESPACE"
	EnvPodName         = "PLEXUS_PROXY_POD_NAME"
	EnvNodeName        = "PLEXUS_PROXY_NODE_NAME"
	EnvInboundPorts    = "PLEXUS_PROXY_INBOUND_PORTS"
	EnvServiceAccount  = "PLEXUS_PROXY_SERVICE_ACCOUNT"
	EnvTokenFile       = "PLEXUS_PROXY_IDENTITY_TOKEN_FILE"
	EnvTrustAnchors    = "PLEXUS_PROXY_TRUST_ANCHORS"
	EnvInboundPolicy   = "PLEXUS_PROXY_INBOUND_POLICY"
	EnvControlNS       = "PLEXUS_PROXY_CONTROL_NAMESPACE"
	EnvCores           = "PLEXUS_PROXY_CORES"

	EnvMaxConnections        = "PLEXUS_PROXY_MAX_CONNECTIONS"
	EnvBodyIdleTimeout       = "PLEXUS_PROXY_BODY_IDLE_TIMEOUT"
	EnvResponseHeaderTimeout = "PLEXUS_PROXY_RESPONSE_HEADER_TIMEOUT"
	EnvWriteTimeout          = "PLEXUS_PROXY_WRITE_TIMEOUT"
	EnvMaxInformational      = "PLEXUS_PROXY_MAX_1XX_RESPONSES"
	EnvAdminMaxConnections   = "PLEXUS_PROXY_ADMIN_MAX_CONNECTIONS"
	EnvAdminIdleTimeout      = "PLEXUS_PROXY_ADMIN_IDLE_TIMEOUT"
)

// Inbound policies (annotation config.plexus.dev/inbound-policy).
const (
	// PolicyPermissive accepts mTLS from meshed clients and plaintext from others.
	PolicyPermissive = "permissive"
	// PolicyMTLS refuses inbound connections that are not our mTLS.
	PolicyMTLS = "mtls"
)

// Defaults, matching ARCHITECTURE.md §2 and Linkerd's defaults where it is silent.
const (
	DefaultInboundPort   = 4143
	DefaultOutboundPort  = 4140
	DefaultAdminPort     = 4191
	DefaultDetectTimeout = 10 * time.Second
	DefaultIdleTimeout   = time.Hour
	DefaultShutdownGrace = 20 * time.Second
	DefaultTokenFile     = "/var/run/secrets/plexus.dev/identity/token"
	DefaultControlNS     = "plexus-system"
	DefaultCores         = 1
	maxCores             = 64

	// DefaultMaxConnections per direction: a silent connection held in
	// protocol detection costs about 20 KB, so both directions full stay
	// well inside the injector's 128 MiB memory limit.
	DefaultMaxConnections        = 2048
	DefaultBodyIdleTimeout       = time.Minute
	DefaultResponseHeaderTimeout = 5 * time.Minute
	DefaultWriteTimeout          = time.Minute
	// DefaultMaxInformational is net/http's own limit, which its
	// transport applies on the requests the fast path hands off.
	DefaultMaxInformational = 5
	maxInformational        = 100

	// DefaultAdminMaxConnections bounds the connections of the admin
	// port, and apart from it those of the redirect probe port: enough for
	// the kubelet's probes, a Prometheus and a few port-forwards (an idle
	// HTTP/1 connection costs about 20 KB).
	DefaultAdminMaxConnections = 64
	// DefaultAdminIdleTimeout closes an admin or probe connection that
	// sends no request for this long (longer than the kubelet's 10 s
	// probe period, so its keep-alive connections are reused).
	DefaultAdminIdleTimeout = 30 * time.Second
)

// Control-plane service accounts; with the control namespace and trust
// domain they give the identities the proxy expects of those services.
const (
	IdentityServiceAccount    = "plexus-identity"
	DestinationServiceAccount = "plexus-destination"
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
	InboundPort  uint16
	OutboundPort uint16
	AdminPort    uint16
	// TapPort serves the tap API (with identity only); 0: no tap server.
	TapPort       uint16
	TapNamespace  string // the tap service's namespace (TapID)
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
	// IdentityAddr (host:port) is the identity service. Unset: no
	// identity, plaintext only, ready at once.
	IdentityAddr string
	// DestinationAddr (host:port) is the destination service. Unset:
	// every connection goes to its original destination. It needs
	// IdentityAddr (the proxy talks to the control plane over mTLS).
	DestinationAddr string
	// TrustDomain, PodNamespace and ServiceAccount make the proxy's own
	// identity; the last two come from the downward API.
	TrustDomain    string
	PodNamespace   string
	ServiceAccount string
	// PodName (downward API) names the pod whose inbound policies the
	// proxy asks destination for; without it no inbound policy applies
	// (a pod injected before policies existed: every client allowed).
	PodName string
	// NodeName (downward API) is told to destination, which answers with
	// the node's zone for zone-aware balancing; unset: no zone preference.
	NodeName string
	// InboundPorts are the ports the pod's containers declare: their
	// inbound policies are asked for at start, and /ready waits for them.
	InboundPorts PortSet
	// TokenFile is the projected service account token sent to identity.
	TokenFile string
	// TrustAnchorsPEM holds the PEM trust anchor certificates (inline).
	TrustAnchorsPEM string
	// InboundPolicy is PolicyPermissive or PolicyMTLS.
	InboundPolicy string
	// ControlNamespace is where the control plane runs; it gives the
	// expected identities of the identity and destination services.
	ControlNamespace string
	// Cores is how many threads run Go code at once (GOMAXPROCS): 1 by
	// default, like linkerd2-proxy's single worker, because a sidecar
	// serves one pod and the wake-ups of a second thread cost more
	// latency than it buys (integration/BENCHMARKS.md). The injector sets
	// it from the proxy's CPU limit.
	Cores int
	// MaxConnections bounds the open connections of each direction's
	// listener; a new one beyond it is closed at once and counted.
	MaxConnections int
	// BodyIdleTimeout: a request body that makes no progress for this
	// long is answered 408 and both connections are closed. 0: no limit.
	BodyIdleTimeout time.Duration
	// ResponseHeaderTimeout: an upstream that sends no response headers
	// this long after the request is answered 504 (not for gRPC, which
	// carries its own deadline). 0: no limit.
	ResponseHeaderTimeout time.Duration
	// WriteTimeout: a write to a client or upstream that makes no
	// progress for this long (the peer stopped reading) closes the
	// connection. 0: no limit.
	WriteTimeout time.Duration
	// MaxInformational bounds the interim (1xx) responses relayed for one
	// request; one more is answered 502.
	MaxInformational int
	// AdminMaxConnections bounds the open connections of the admin port,
	// and separately of the redirect probe port; one more is closed at
	// once and counted (limit_exceeded_total{limit="connections"}).
	AdminMaxConnections int
	// AdminIdleTimeout closes an admin or probe connection idle for this
	// long between requests.
	AdminIdleTimeout time.Duration
	// InboundSource are the addresses the inbound side dials the
	// application from (inboundsource.go); none: the kernel's choice.
	InboundSource []netip.Addr
}

// Default returns the configuration used when no variable is set.
func Default() Config {
	return Config{
		InboundPort:   DefaultInboundPort,
		OutboundPort:  DefaultOutboundPort,
		AdminPort:     DefaultAdminPort,
		TapPort:       DefaultTapPort,
		TapNamespace:  DefaultTapNamespace,
		OpaquePorts:   DefaultOpaquePorts(),
		DetectTimeout: DefaultDetectTimeout,
		IdleTimeout:   DefaultIdleTimeout,
		ShutdownGrace: DefaultShutdownGrace,
		LogLevel:      slog.LevelInfo,

		TrustDomain:      spiffe.DefaultTrustDomain,
		TokenFile:        DefaultTokenFile,
		InboundPolicy:    PolicyPermissive,
		ControlNamespace: DefaultControlNS,
		Cores:            DefaultCores,

		MaxConnections:        DefaultMaxConnections,
		BodyIdleTimeout:       DefaultBodyIdleTimeout,
		ResponseHeaderTimeout: DefaultResponseHeaderTimeout,
		WriteTimeout:          DefaultWriteTimeout,
		MaxInformational:      DefaultMaxInformational,
		AdminMaxConnections:   DefaultAdminMaxConnections,
		AdminIdleTimeout:      DefaultAdminIdleTimeout,
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
	ports := func(name, v string, dst *PortSet) {
		s, err := ParsePortSet(v)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: %w", name, v, err))
			return
		}
		*dst = s
	}
	if v, ok := lookup(EnvOpaquePorts); ok {
		// Set but empty means "no opaque ports"; unset keeps the defaults.
		ports(EnvOpaquePorts, v, &c.OpaquePorts)
	}
	dur(EnvDetectTimeout, &c.DetectTimeout)
	dur(EnvIdleTimeout, &c.IdleTimeout)
	dur(EnvShutdownGrace, &c.ShutdownGrace)
	dur(EnvBodyIdleTimeout, &c.BodyIdleTimeout)
	dur(EnvResponseHeaderTimeout, &c.ResponseHeaderTimeout)
	dur(EnvWriteTimeout, &c.WriteTimeout)
	dur(EnvAdminIdleTimeout, &c.AdminIdleTimeout)
	if v, ok := get(EnvLogLevel); ok {
		if err := c.LogLevel.UnmarshalText([]byte(v)); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q: want debug, info, warn or error: %w", EnvLogLevel, v, err))
		}
	}
	str := func(name string, dst *string) {
		if v, ok := get(name); ok {
			*dst = v
		}
	}
	str(EnvIdentityAddr, &c.IdentityAddr)
	str(EnvDestinationAddr, &c.DestinationAddr)
	str(EnvTrustDomain, &c.TrustDomain)
	str(EnvPodNamespace, &c.PodNamespace)
	str(EnvPodName, &c.PodName)
	str(EnvNodeName, &c.NodeName)
	if v, ok := get(EnvInboundPorts); ok {
		ports(EnvInboundPorts, v, &c.InboundPorts)
	}
	str(EnvServiceAccount, &c.ServiceAccount)
	str(EnvTokenFile, &c.TokenFile)
	str(EnvTrustAnchors, &c.TrustAnchorsPEM)
	str(EnvInboundPolicy, &c.InboundPolicy)
	str(EnvControlNS, &c.ControlNamespace)
	count := func(name, what string, dst *int) {
		if v, ok := get(name); ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: want a whole number of %s: %w", name, v, what, err))
				return
			}
			*dst = n
		}
	}
	count(EnvCores, "cores", &c.Cores)
	count(EnvMaxConnections, "connections", &c.MaxConnections)
	count(EnvMaxInformational, "responses", &c.MaxInformational)
	count(EnvAdminMaxConnections, "connections", &c.AdminMaxConnections)
	if err := c.tapFromEnv(get); err != nil {
		errs = append(errs, err)
	}
	if err := c.inboundSourceFromEnv(get); err != nil {
		errs = append(errs, err)
	}
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
	if c.Cores < 1 || c.Cores > maxCores {
		errs = append(errs, fmt.Errorf("%s: want 1 to %d, got %d", EnvCores, maxCores, c.Cores))
	}
	if c.MaxConnections < 1 {
		errs = append(errs, fmt.Errorf("%s: want at least 1, got %d", EnvMaxConnections, c.MaxConnections))
	}
	if c.AdminMaxConnections < 1 {
		errs = append(errs, fmt.Errorf("%s: want at least 1, got %d", EnvAdminMaxConnections, c.AdminMaxConnections))
	}
	if c.AdminIdleTimeout <= 0 {
		errs = append(errs, fmt.Errorf("%s: want a positive duration, got %s", EnvAdminIdleTimeout, c.AdminIdleTimeout))
	}
	if c.MaxInformational < 0 || c.MaxInformational > maxInformational {
		errs = append(errs, fmt.Errorf("%s: want 0 to %d, got %d", EnvMaxInformational, maxInformational, c.MaxInformational))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{EnvBodyIdleTimeout, c.BodyIdleTimeout}, {EnvResponseHeaderTimeout, c.ResponseHeaderTimeout}, {EnvWriteTimeout, c.WriteTimeout}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: must not be negative (0 turns it off), got %s", d.name, d.v))
		}
	}
	errs = append(errs, c.validateIdentity()...)
	if err := c.validateTap(); err != nil {
		errs = append(errs, err)
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
