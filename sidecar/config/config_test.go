package config

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
	"github.com/plexus-mesh/plexus/testsupport/testpki"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaults(t *testing.T) {
	c, err := FromEnv(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.InboundPort != 4143 || c.OutboundPort != 4140 || c.AdminPort != 4191 {
		t.Errorf("ports = %d/%d/%d", c.InboundPort, c.OutboundPort, c.AdminPort)
	}
	want := []uint16{25, 587, 3306, 4444, 5432, 6379, 9300, 11211}
	if got := c.OpaquePorts.Ports(); !slices.Equal(got, want) {
		t.Errorf("opaque ports = %v, want %v", got, want)
	}
	if c.DetectTimeout != 10*time.Second || c.LogLevel != slog.LevelInfo {
		t.Errorf("detect=%s level=%s", c.DetectTimeout, c.LogLevel)
	}
}

func TestFromEnvOverrides(t *testing.T) {
	c, err := FromEnv(env(map[string]string{
		EnvInboundPort:   "5143",
		EnvOutboundPort:  " 5140 ",
		EnvAdminPort:     "5191",
		EnvOpaquePorts:   "22, 8000-8002",
		EnvDetectTimeout: "250ms",
		EnvIdleTimeout:   "5m",
		EnvShutdownGrace: "0s",
		EnvLogLevel:      "debug",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.InboundPort != 5143 || c.OutboundPort != 5140 || c.AdminPort != 5191 {
		t.Errorf("ports = %d/%d/%d", c.InboundPort, c.OutboundPort, c.AdminPort)
	}
	if got := c.OpaquePorts.Ports(); !slices.Equal(got, []uint16{22, 8000, 8001, 8002}) {
		t.Errorf("opaque = %v", got)
	}
	if c.DetectTimeout != 250*time.Millisecond || c.IdleTimeout != 5*time.Minute || c.ShutdownGrace != 0 || c.LogLevel != slog.LevelDebug {
		t.Errorf("got %+v", c)
	}
}

func TestEmptyOpaquePortsMeansNone(t *testing.T) {
	c, err := FromEnv(env(map[string]string{EnvOpaquePorts: ""}))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.OpaquePorts.Ports(); len(got) != 0 {
		t.Errorf("opaque = %v, want none", got)
	}
}

func TestFromEnvErrorsNameTheVariable(t *testing.T) {
	for name, val := range map[string]string{
		EnvInboundPort:   "0",
		EnvOutboundPort:  "65536",
		EnvAdminPort:     "abc",
		EnvOpaquePorts:   "25,90-80",
		EnvDetectTimeout: "10",
		EnvIdleTimeout:   "forever",
		EnvShutdownGrace: "x",
		EnvLogLevel:      "loud",
		EnvRedirectProbe: "-1",
		EnvCores:         "two",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := FromEnv(env(map[string]string{name: val}))
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Fatalf("err = %v, want one naming %s", err, name)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	cases := map[string]struct {
		mut  func(*Config)
		want string
	}{
		"same ports":                   {func(c *Config) { c.AdminPort = c.InboundPort }, EnvAdminPort},
		"zero port":                    {func(c *Config) { c.OutboundPort = 0 }, EnvOutboundPort},
		"zero detect":                  {func(c *Config) { c.DetectTimeout = 0 }, EnvDetectTimeout},
		"negative idle":                {func(c *Config) { c.IdleTimeout = -time.Second }, EnvIdleTimeout},
		"negative grace":               {func(c *Config) { c.ShutdownGrace = -time.Second }, EnvShutdownGrace},
		"no cores":                     {func(c *Config) { c.Cores = 0 }, EnvCores},
		"too many cores":               {func(c *Config) { c.Cores = 65 }, EnvCores},
		"destination without identity": {func(c *Config) { c.DestinationAddr = "x:8086" }, EnvDestinationAddr},
		"mtls policy without identity": {func(c *Config) { c.InboundPolicy = PolicyMTLS }, EnvInboundPolicy},
		"bad policy":                   {func(c *Config) { c.InboundPolicy = "strict" }, EnvInboundPolicy},
		"identity without anchors":     {func(c *Config) { withIdentity(c); c.TrustAnchorsPEM = "" }, EnvTrustAnchors},
		"anchors not PEM":              {func(c *Config) { withIdentity(c); c.TrustAnchorsPEM = "hello" }, EnvTrustAnchors},
		"anchor not a CA": {func(c *Config) {
			withIdentity(c)
			chain, _ := testpki.PEM(testpki.New("t").Leaf(spiffe.New("cluster.local", "a", "b")))
			c.TrustAnchorsPEM = string(chain[:strings.Index(string(chain), "-----END CERTIFICATE-----")+26])
		}, "not a CA"},
		"identity without namespace":       {func(c *Config) { withIdentity(c); c.PodNamespace = "" }, EnvPodNamespace},
		"identity without service account": {func(c *Config) { withIdentity(c); c.ServiceAccount = "" }, EnvServiceAccount},
		"identity addr without port":       {func(c *Config) { withIdentity(c); c.IdentityAddr = "identity" }, EnvIdentityAddr},
		"destination addr bad port":        {func(c *Config) { withIdentity(c); c.DestinationAddr = "d:0" }, EnvDestinationAddr},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			c := Default()
			tc.mut(&c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// withIdentity sets a complete, valid identity configuration.
func withIdentity(c *Config) {
	c.IdentityAddr = "plexus-identity.plexus-system.svc.cluster.local:8080"
	c.DestinationAddr = "plexus-destination.plexus-system.svc.cluster.local:8086"
	c.PodNamespace, c.ServiceAccount = "shop", "web"
	c.TrustAnchorsPEM = string(testpki.New("t").AnchorPEM())
}

func TestIdentityConfig(t *testing.T) {
	anchors := string(testpki.New("t").AnchorPEM())
	c, err := FromEnv(env(map[string]string{
		EnvIdentityAddr:    "identity:8080",
		EnvDestinationAddr: "[fd00::1]:8086",
		EnvPodNamespace:    "shop",
		EnvServiceAccount:  "web",
		EnvTrustAnchors:    anchors,
		EnvInboundPolicy:   "mtls",
		EnvTrustDomain:     "example.org",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if !c.IdentityEnabled() || c.InboundPolicy != PolicyMTLS || c.TokenFile != DefaultTokenFile {
		t.Errorf("got %+v", c)
	}
	for got, want := range map[string]string{
		c.ID().String():                  "spiffe://example.org/ns/shop/sa/web",
		c.IdentityServerID().String():    "spiffe://example.org/ns/plexus-system/sa/plexus-identity",
		c.DestinationServerID().String(): "spiffe://example.org/ns/plexus-system/sa/plexus-destination",
	} {
		if got != want {
			t.Errorf("got %s, want %s", got, want)
		}
	}
	if _, err := c.TrustAnchors(); err != nil {
		t.Error(err)
	}
	// Documented default: nothing set means plaintext, original destination.
	d := Default()
	if d.IdentityEnabled() || d.DestinationAddr != "" || d.InboundPolicy != PolicyPermissive || d.Validate() != nil {
		t.Errorf("defaults: %+v", d)
	}
	// Identity alone (no destination) is valid.
	withIdentity(&d)
	d.DestinationAddr = ""
	if err := d.Validate(); err != nil {
		t.Errorf("identity without destination: %v", err)
	}
}

func TestParsePortSet(t *testing.T) {
	for in, want := range map[string][]uint16{
		"":              nil,
		"1":             {1},
		"65535":         {65535},
		"3,1,2":         {1, 2, 3},
		"10-12, 11":     {10, 11, 12},
		" 7 - 7 ":       {7},
		"65534-65535,,": {65534, 65535},
	} {
		s, err := ParsePortSet(in)
		if err != nil {
			t.Errorf("%q: %v", in, err)
			continue
		}
		if got := s.Ports(); !slices.Equal(got, want) {
			t.Errorf("%q = %v, want %v", in, got, want)
		}
	}
	for _, bad := range []string{"0", "-", "1-", "a", "5-3", "70000", "1-70000", "1 2"} {
		if _, err := ParsePortSet(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// TestContextToken: the namespace and node go to destination as JSON
// (destination's parseContext reads it), whatever characters they hold;
// an unknown node is left out.
func TestContextToken(t *testing.T) {
	for _, tc := range []struct {
		c    Config
		want string
	}{
		{Config{PodNamespace: "shop", NodeName: "node-1"}, `{"ns":"shop","nodeName":"node-1"}`},
		{Config{PodNamespace: "shop"}, `{"ns":"shop"}`},
		{Config{PodNamespace: `a"b`, NodeName: "<n>"}, `{"ns":"a\"b","nodeName":"\u003cn\u003e"}`},
	} {
		if got := tc.c.ContextToken(); got != tc.want {
			t.Errorf("ContextToken of %+v = %s, want %s", tc.c, got, tc.want)
		}
	}
}
