package destination

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestIntersect(t *testing.T) {
	anyID := identitySet{prefixes: []string{""}}
	nsA := identitySet{prefixes: []string{"spiffe://td/ns/a/sa/"}}
	for _, tc := range []struct {
		a, b identitySet
		want string
	}{
		{anyID, identitySet{exact: []string{"spiffe://td/ns/a/sa/x"}}, `{[spiffe://td/ns/a/sa/x] []}`},
		{anyID, nsA, `{[] [spiffe://td/ns/a/sa/]}`},
		{nsA, identitySet{exact: []string{"spiffe://td/ns/a/sa/x", "spiffe://td/ns/b/sa/y"}}, `{[spiffe://td/ns/a/sa/x] []}`},
		{nsA, identitySet{prefixes: []string{"spiffe://td/ns/b/sa/"}}, `{[] []}`},
		{nsA, identitySet{prefixes: []string{"spiffe://td/ns/a/sa/web"}}, `{[] [spiffe://td/ns/a/sa/web]}`},
		{identitySet{exact: []string{"x", "y"}}, identitySet{exact: []string{"y", "z"}}, `{[y] []}`},
	} {
		for _, got := range []identitySet{intersect(tc.a, tc.b), intersect(tc.b, tc.a)} {
			if fmt.Sprint(got) != tc.want {
				t.Errorf("intersect(%v, %v) = %v, want %s", tc.a, tc.b, got, tc.want)
			}
		}
	}
}

func TestProbeRoute(t *testing.T) {
	p := inboundPod(nil)
	if r := probeRoute(p, 9090); r != nil {
		t.Errorf("port without probes: %v, want no probe route", r)
	}
	p.Status.HostIPs = []corev1.HostIP{{IP: "fd00::10"}, {IP: "192.168.1.10"}}
	r := probeRoute(p, 8080)
	if got := authzText(r.GetAuthorizations()); got != "[default:probe{nets=fd00::10/128,192.168.1.10/32}]" {
		t.Errorf("dual-stack node: %s", got)
	}
	p.Status.HostIP, p.Status.HostIPs = "", nil
	if r := probeRoute(p, 8080); r != nil {
		t.Errorf("no host IP yet: %v, want no probe route", r)
	}
}
