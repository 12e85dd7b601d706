package inject

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

func TestProxyCores(t *testing.T) {
	for limit, want := range map[string]int{"100m": 1, "1": 1, "1001m": 2, "1500m": 2, "3": 3, "1000": 64} {
		if got := proxyCores(resource.MustParse(limit)); got != want {
			t.Errorf("proxyCores(%s) = %d, want %d", limit, got, want)
		}
	}
}

// The default inbound policy annotation is checked at injection, and a
// value destination would not understand is refused with the annotation
// named.
func TestDefaultInboundPolicyAnnotation(t *testing.T) {
	for _, v := range DefaultInboundPolicies {
		if _, err := parseSettings(map[string]string{AnnotationDefaultInboundPolicy: v}, DefaultResources()); err != nil {
			t.Errorf("%s: %v", v, err)
		}
	}
	_, err := parseSettings(map[string]string{AnnotationDefaultInboundPolicy: "allow-all"}, DefaultResources())
	if err == nil || !strings.Contains(err.Error(), AnnotationDefaultInboundPolicy) || !strings.Contains(err.Error(), "allow-all") {
		t.Errorf("allow-all: %v, want an error naming the annotation and value", err)
	}
}

// A namespace's default inbound policy is not copied onto its pods:
// destination reads it live (the pod's copy would be fixed at admission).
func TestNamespaceDefaultInboundPolicyNotCopied(t *testing.T) {
	got := merged(map[string]string{}, map[string]string{AnnotationDefaultInboundPolicy: "deny", AnnotationProxyLogLevel: "debug"})
	if _, ok := got[AnnotationDefaultInboundPolicy]; ok || got[AnnotationProxyLogLevel] != "debug" {
		t.Errorf("merged = %v, want the log level copied and the default inbound policy not", got)
	}
	if got := merged(map[string]string{AnnotationDefaultInboundPolicy: "audit"}, nil); got[AnnotationDefaultInboundPolicy] != "audit" {
		t.Errorf("the pod's own value: %v", got)
	}
}
