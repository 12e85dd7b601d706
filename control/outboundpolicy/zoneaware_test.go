package outboundpolicy

import (
	"strings"
	"testing"

	"github.com/plexus-mesh/plexus/mesh/api/balancerannotations"
)

// TestZoneAware: the policy carries the client's zone when the Service
// asks for zone-aware balancing (annotation, or PreferClose without the
// annotation saying no) and the zone is known; a malformed annotation is
// warned about and counts as unset.
func TestZoneAware(t *testing.T) {
	preferClose := balancerannotations.TrafficDistributionPreferClose
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		td          *string
		clientZone  string
		want        string // the policy's local zone; "": no ZoneAware
		warn        string
	}{
		{"off", nil, nil, "zone-a", "", ""},
		{"annotation", map[string]string{balancerannotations.AnnotationZoneAware: "true"}, nil, "zone-a", "zone-a", ""},
		{"PreferClose", nil, &preferClose, "zone-b", "zone-b", ""},
		{"PreferClose opted out", map[string]string{balancerannotations.AnnotationZoneAware: "false"}, &preferClose, "zone-b", "", ""},
		{"client zone unknown", map[string]string{balancerannotations.AnnotationZoneAware: "true"}, nil, "", "", ""},
		{"malformed", map[string]string{balancerannotations.AnnotationZoneAware: "on"}, nil, "zone-a", "",
			`Service shop/web: balancer.plexus.dev/zone-aware: "on" is not "true" or "false"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			svc := webService.DeepCopy()
			svc.Annotations = tc.annotations
			svc.Spec.TrafficDistribution = tc.td
			var warned []string
			policy := Translate(Input{
				ClusterDomain: "cluster.local", ClientZone: tc.clientZone, Service: svc, Port: 80, Services: services(svc),
				Warn: func(err error) { warned = append(warned, err.Error()) },
			})
			if got := policy.GetZoneAware().GetLocalZone(); got != tc.want || (tc.want == "") != (policy.ZoneAware == nil) {
				t.Errorf("zone aware %v, want local zone %q", policy.ZoneAware, tc.want)
			}
			if got := strings.Join(warned, "\n"); got != tc.warn {
				t.Errorf("warned %q, want %q", got, tc.warn)
			}
		})
	}
}
