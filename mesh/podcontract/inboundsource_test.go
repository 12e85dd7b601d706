package podcontract

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestParseInboundSource(t *testing.T) {
	got, err := ParseInboundSource(DefaultInboundSource)
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("127.0.0.6"), netip.MustParseAddr("::1")}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ParseInboundSource(%q) = %v, want %v", DefaultInboundSource, got, want)
	}
	c := Defaults()
	c.InboundSource = got
	if a, ok := c.InboundSourceOf(false); !ok || a != want[0] {
		t.Errorf("IPv4 source = %v %v", a, ok)
	}
	if a, ok := c.InboundSourceOf(true); !ok || a != want[1] {
		t.Errorf("IPv6 source = %v %v", a, ok)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if got, err := ParseInboundSource(" 127.0.0.6 "); err != nil || len(got) != 1 {
		t.Errorf("IPv4 only: %v %v", got, err)
	}
	if got, err := ParseInboundSource(""); err != nil || got != nil {
		t.Errorf("empty: %v %v", got, err)
	}
	for bad, why := range map[string]string{
		"127.0.0.6,127.0.0.7": "more than one",
		"::1,::1":             "more than one",
		"::6":                 "not a loopback",
		"10.0.0.1":            "not a loopback",
		"::ffff:127.0.0.6":    "not a loopback",
		"::1%lo":              "not a loopback",
		"localhost":           "ParseAddr",
	} {
		_, err := ParseInboundSource(bad)
		if err == nil || !strings.Contains(err.Error(), why) || !strings.Contains(err.Error(), EnvInboundSource) {
			t.Errorf("ParseInboundSource(%q) = %v, want an error naming %s and saying %q", bad, err, EnvInboundSource, why)
		}
	}
	c.InboundSource = []netip.Addr{netip.MustParseAddr("10.0.0.1")}
	if err := c.Validate(); err == nil {
		t.Error("Validate accepted a non-loopback inbound source")
	}
}
