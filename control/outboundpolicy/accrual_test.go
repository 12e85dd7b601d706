package outboundpolicy

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/control/serviceprofile"
	"github.com/plexus-mesh/plexus/mesh/api/balancerannotations"
	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
)

// translateAnnotated translates Service shop/web port 80 annotated with
// annotations, with the given routes and profile, and returns the policy
// and what Warn was told ("" for nothing).
func translateAnnotated(t *testing.T, annotations map[string]string, routes []*gatewayv1.HTTPRoute, profile *serviceprofile.ServiceProfile) (*destinationpb.OutboundPolicy, string) {
	t.Helper()
	svc := webService.DeepCopy()
	svc.Annotations = annotations
	var warned []string
	policy := Translate(Input{
		ClusterDomain: "cluster.local", Service: svc, Port: 80, HTTPRoutes: routes, Profile: profile,
		Services: services(svc),
		Warn:     func(err error) { warned = append(warned, err.Error()) },
	})
	if len(warned) > 1 {
		t.Errorf("Warn called %d times in one Translate", len(warned))
	}
	return policy, strings.Join(warned, "\n")
}

// TestFailureAccrualFromAnnotations: the Service's balancer annotations
// become the policy's FailureAccrual with every field set; a malformed
// one is left at its default and reported once through Warn.
func TestFailureAccrualFromAnnotations(t *testing.T) {
	accrual := func(n uint32, minPenalty, maxPenalty time.Duration, jitter float64, percent uint32) *destinationpb.FailureAccrual {
		return &destinationpb.FailureAccrual{ConsecutiveFailures: n, MinPenalty: durationpb.New(minPenalty), MaxPenalty: durationpb.New(maxPenalty), JitterRatio: jitter, MinHealthyPercent: percent}
	}
	defaults := accrual(7, time.Second, time.Minute, 0.5, 50)
	on := func(kv ...string) map[string]string {
		m := map[string]string{balancerannotations.AnnotationFailureAccrual: "consecutive"}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	for _, tc := range []struct {
		name        string
		annotations map[string]string
		want        *destinationpb.FailureAccrual
		warn        string // "" : no warning; else in the warning
	}{
		{"absent", nil, nil, ""},
		{"settings without the switch", map[string]string{balancerannotations.AnnotationMaxFailures: "3"}, nil, ""},
		{"consecutive, defaults", on(), defaults, ""},
		{"every field set", on(
			balancerannotations.AnnotationMaxFailures, "3",
			balancerannotations.AnnotationMinPenalty, "500ms",
			balancerannotations.AnnotationMaxPenalty, "10s",
			balancerannotations.AnnotationJitterRatio, "0.25",
			balancerannotations.AnnotationMinHealthyPercent, "75%",
		), accrual(3, 500*time.Millisecond, 10*time.Second, 0.25, 75), ""},
		{"malformed field at its default", on(balancerannotations.AnnotationMaxFailures, "seven", balancerannotations.AnnotationJitterRatio, "0"),
			accrual(7, time.Second, time.Minute, 0, 50),
			`Service shop/web: balancer.plexus.dev/failure-accrual-consecutive-max-failures: "seven" is not an integer of at least 1`},
		{"malformed switch", map[string]string{balancerannotations.AnnotationFailureAccrual: "always"}, nil,
			`Service shop/web: balancer.plexus.dev/failure-accrual: "always" is not "consecutive"`},
		{"malformed setting without the switch", map[string]string{balancerannotations.AnnotationMinHealthyPercent: "half"}, nil,
			`Service shop/web: balancer.plexus.dev/min-healthy-percent: "half" is not an integer percentage in [0, 100]`},
		{"with a malformed retry annotation", on(balancerannotations.AnnotationMinPenalty, "soon", "retry.plexus.dev/limit", "x"),
			defaults,
			"Service shop/web: retry.plexus.dev/limit: \"x\" is not a non-negative integer\n" +
				`Service shop/web: balancer.plexus.dev/failure-accrual-consecutive-min-penalty: "soon" is not a positive duration (like 500ms or 10s)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			policy, warned := translateAnnotated(t, tc.annotations, nil, nil)
			if !proto.Equal(policy.FailureAccrual, tc.want) {
				t.Errorf("failure accrual %v, want %v", policy.FailureAccrual, tc.want)
			}
			if warned != tc.warn {
				t.Errorf("warned\n %q\nwant\n %q", warned, tc.warn)
			}
		})
	}
}

// TestFailureAccrualEverySource: the accrual belongs to the Service, so
// policies from routes and from a profile carry it as the default one
// does.
func TestFailureAccrualEverySource(t *testing.T) {
	annotations := map[string]string{
		balancerannotations.AnnotationFailureAccrual: "consecutive",
		balancerannotations.AnnotationMaxFailures:    "4",
	}
	profile := &serviceprofile.ServiceProfile{}
	profile.Namespace, profile.Name = "shop", "web.shop.svc.cluster.local"
	profile.Spec.Routes = []*serviceprofile.RouteSpec{{Name: "all", Condition: &serviceprofile.RequestMatch{PathRegex: ".*"}}}
	route := testRoute(nil, "web", serviceParent("web", ptrTo[int32](80)))
	for _, tc := range []struct {
		source  string
		routes  []*gatewayv1.HTTPRoute
		profile *serviceprofile.ServiceProfile
	}{
		{SourceDefault, nil, nil},
		{SourceRoutes, []*gatewayv1.HTTPRoute{route}, nil},
		{SourceServiceProfile, nil, profile},
	} {
		policy, warned := translateAnnotated(t, annotations, tc.routes, tc.profile)
		if policy.Source != tc.source || warned != "" {
			t.Fatalf("source %q (warned %q), want %q", policy.Source, warned, tc.source)
		}
		if got := policy.FailureAccrual.GetConsecutiveFailures(); got != 4 {
			t.Errorf("%s: failure accrual %v, want 4 consecutive failures", tc.source, policy.FailureAccrual)
		}
	}
}
