package destination

import (
	"fmt"
	"testing"
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
	// From any address: the kubelet's is the node's on the pod network.
	p.Status.HostIP, p.Status.HostIPs = "", nil
	r := probeRoute(p, 8080)
	if got := authzText(r.GetAuthorizations()); got != "[default:probe{}]" {
		t.Errorf("probe route authorizations: %s, want unauthenticated from anywhere", got)
	}
}
