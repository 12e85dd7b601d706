package podcontract

import (
	"reflect"
	"strings"
	"testing"
)

func TestAdmittedRoundTrip(t *testing.T) {
	a := map[string]string{
		AnnotationSkipInboundPorts:           "25,8000-8100",
		AnnotationSkipOutboundSubnets:        "10.0.0.0/8",
		AnnotationProxyUID:                   "2200",
		AnnotationPrefix + "proxy-log-level": "debug", // not a redirect setting
		"plexus.dev/injected":                "true",
	}
	v := EncodeAdmitted(a)
	want := `{"config.plexus.dev/proxy-uid":"2200","config.plexus.dev/skip-inbound-ports":"25,8000-8100","config.plexus.dev/skip-outbound-subnets":"10.0.0.0/8"}`
	if v != want {
		t.Fatalf("EncodeAdmitted = %s\nwant %s", v, want)
	}
	got, err := DecodeAdmitted(v)
	if err != nil {
		t.Fatal(err)
	}
	delete(a, AnnotationPrefix+"proxy-log-level")
	delete(a, "plexus.dev/injected")
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("DecodeAdmitted = %v, want %v", got, a)
	}
	if v := EncodeAdmitted(nil); v != "{}" {
		t.Errorf("EncodeAdmitted(nil) = %s, want {}", v)
	}
	if got, err := DecodeAdmitted("{}"); err != nil || got == nil || len(got) != 0 {
		t.Errorf("DecodeAdmitted({}) = %v, %v; want an empty map", got, err)
	}
}

func TestDecodeAdmittedRefuses(t *testing.T) {
	for v, want := range map[string]string{
		"":     EnvAdmitted,
		"null": "not null",
		`["config.plexus.dev/skip-inbound-ports"]`:           EnvAdmitted,
		`{"config.plexus.dev/proxy-uid":0}`:                  EnvAdmitted,
		`{"config.plexus.dev/skip-inbound-portz":"1-65535"}`: "skip-inbound-portz",
	} {
		if _, err := DecodeAdmitted(v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeAdmitted(%q) err = %v, want one with %q", v, err, want)
		}
	}
}
