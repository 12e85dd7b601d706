package podcontract

import (
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestParsePorts(t *testing.T) {
	got, err := ParsePorts(" 25, 443,8000-8100,,65535")
	if err != nil {
		t.Fatal(err)
	}
	want := []PortRange{{25, 25}, {443, 443}, {8000, 8100}, {65535, 65535}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	if got, err := ParsePorts(""); err != nil || len(got) != 0 {
		t.Fatalf("empty list: %v, %v", got, err)
	}
	for _, bad := range []string{"0", "65536", "http", "10-5", "1-", "-3", "1,2,x", "80 81"} {
		if _, err := ParsePorts(bad); err == nil {
			t.Errorf("ParsePorts(%q) accepted a malformed list", bad)
		}
	}
}

func TestParseSubnets(t *testing.T) {
	got, err := ParseSubnets("10.1.2.3/8, 192.168.0.1,fd00::1/8,2001:db8::1")
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.168.0.1/32"),
		netip.MustParsePrefix("fd00::/8"), netip.MustParsePrefix("2001:db8::1/128"),
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for _, bad := range []string{"10.0.0.0/33", "10.0.0", "fe80::1%eth0", "::ffff:10.0.0.1", "nope/8"} {
		if _, err := ParseSubnets(bad); err == nil {
			t.Errorf("ParseSubnets(%q) accepted a malformed list", bad)
		}
	}
}

func TestFromAnnotationsOverlay(t *testing.T) {
	base := Defaults()
	base.SkipOutboundPorts = []PortRange{{443, 443}}
	base.SkipOutboundSubnets = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12")}
	c, err := FromAnnotations(base, map[string]string{
		AnnotationSkipOutboundPorts:   "25",
		AnnotationSkipOutboundSubnets: "169.254.169.254",
		AnnotationSkipInboundPorts:    "22,8000-8100",
		AnnotationSkipInboundSubnets:  "172.16.0.0/12",
		AnnotationOpaquePorts:         "5432",
		AnnotationProxyUID:            "3000",
		AnnotationInboundPort:         "5143",
		AnnotationOutboundPort:        "5140",
		AnnotationAdminPort:           "5191",
		"config.plexus.dev/unknown":   "ignored",
		"other":                       "x",
	})
	if err != nil {
		t.Fatal(err)
	}
	want := Config{
		InboundPort: 5143, OutboundPort: 5140, AdminPort: 5191, ProxyUID: 3000, ProxyGID: DefaultProxyGID,
		SkipInboundPorts:    []PortRange{{22, 22}, {8000, 8100}},
		SkipOutboundPorts:   []PortRange{{443, 443}, {25, 25}},
		SkipInboundSubnets:  []netip.Prefix{netip.MustParsePrefix("172.16.0.0/12")},
		SkipOutboundSubnets: []netip.Prefix{netip.MustParsePrefix("10.96.0.0/12"), netip.MustParsePrefix("169.254.169.254/32")},
		OpaquePorts:         []PortRange{{5432, 5432}},
	}
	if !reflect.DeepEqual(c, want) {
		t.Fatalf("got  %+v\nwant %+v", c, want)
	}
	if len(base.SkipOutboundPorts) != 1 || len(base.SkipOutboundSubnets) != 1 {
		t.Fatalf("FromAnnotations modified its base: %+v", base)
	}
	if c, err := FromAnnotations(Defaults(), nil); err != nil || !reflect.DeepEqual(c, Defaults()) {
		t.Fatalf("no annotations: %+v, %v", c, err)
	}
}

func TestFromAnnotationsErrorsNameTheAnnotation(t *testing.T) {
	cases := map[string]string{
		AnnotationSkipInboundPorts:    "22,abc",
		AnnotationSkipOutboundPorts:   "9000-80",
		AnnotationSkipInboundSubnets:  "10.0.0.0/40",
		AnnotationSkipOutboundSubnets: "not-a-cidr",
		AnnotationOpaquePorts:         "0",
		AnnotationProxyUID:            "root",
		AnnotationInboundPort:         "70000",
		AnnotationOutboundPort:        "",
		AnnotationAdminPort:           "x",
	}
	for name, value := range cases {
		_, err := FromAnnotations(Defaults(), map[string]string{name: value})
		var ae *AnnotationError
		if !errors.As(err, &ae) {
			t.Errorf("%s=%q: got %v, want an *AnnotationError", name, value, err)
			continue
		}
		if ae.Annotation != name || !strings.Contains(err.Error(), name) || !strings.Contains(err.Error(), value) {
			t.Errorf("%s=%q: error %q does not name the annotation and value", name, value, err)
		}
	}
	if _, err := FromAnnotations(Defaults(), map[string]string{AnnotationProxyUID: "0"}); err == nil {
		t.Error("proxy-uid 0 accepted")
	}
}

func TestValidate(t *testing.T) {
	if err := Defaults().Validate(); err != nil {
		t.Fatalf("defaults invalid: %v", err)
	}
	for name, mutate := range map[string]func(*Config){
		"same ports":       func(c *Config) { c.AdminPort = c.InboundPort },
		"zero port":        func(c *Config) { c.OutboundPort = 0 },
		"root uid":         func(c *Config) { c.ProxyUID = 0 },
		"root gid":         func(c *Config) { c.ProxyGID = 0 },
		"skip own inbound": func(c *Config) { c.SkipInboundPorts = []PortRange{{4000, 4200}} },
		"invalid prefix":   func(c *Config) { c.SkipOutboundSubnets = []netip.Prefix{{}} },
	} {
		c := Defaults()
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
	// Through annotations, a conflict is reported too.
	_, err := FromAnnotations(Defaults(), map[string]string{AnnotationOutboundPort: "4143"})
	if err == nil || !strings.Contains(err.Error(), "4143") {
		t.Errorf("port conflict via annotation: %v", err)
	}
}
