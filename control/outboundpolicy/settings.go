package outboundpolicy

import (
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/api/routeannotations"
)

// routeSettings parses a route's annotations over the parent Service's;
// a malformed one keeps the route from being Accepted.
func (e *env) routeSettings(annotations map[string]string, p *problems) routeannotations.Settings {
	s, err := routeannotations.Parse(annotations)
	if err != nil {
		// One line per annotation: values are quoted, so they hold no
		// newline.
		p.invalid = append(p.invalid, strings.Split(err.Error(), "\n")...)
	}
	return routeannotations.Merge(e.service, s)
}

// applySettings sets rule's retry policy and timeouts from the
// annotations s.
func applySettings(rule *destinationpb.OutboundRule, s routeannotations.Settings) {
	if s.Retries() {
		rule.Retry = &destinationpb.RetryPolicy{
			Limit:          s.EffectiveLimit(),
			GrpcCodes:      s.GRPCCodes,
			AttemptTimeout: duration(s.AttemptTimeout),
			Budget:         budget(s.EffectiveBudget()),
		}
		for _, r := range s.HTTPStatuses {
			rule.Retry.HttpStatuses = append(rule.Retry.HttpStatuses, &destinationpb.StatusRange{Min: r.Min, Max: r.Max})
		}
	}
	rule.Timeouts = timeouts(&destinationpb.Timeouts{
		Request:  duration(s.RequestTimeout),
		Response: duration(s.ResponseTimeout),
		Idle:     duration(s.IdleTimeout),
	})
}

// applyGatewayTimeouts puts an HTTPRoute rule's timeouts field over the
// annotations: request → Timeouts.request, backendRequest →
// Timeouts.response, each where set; "0s" turns that timeout off.
func applyGatewayTimeouts(rule *destinationpb.OutboundRule, t *gatewayv1.HTTPRouteTimeouts, at string, p *problems) {
	if t == nil {
		return
	}
	all := rule.Timeouts
	if all == nil {
		all = &destinationpb.Timeouts{}
	}
	set := func(dst **durationpb.Duration, d *gatewayv1.Duration, field string) {
		if d == nil {
			return
		}
		v, err := time.ParseDuration(string(*d))
		if err != nil || v < 0 {
			p.invalidf("%s.timeouts.%s: %q is not a duration", at, field, *d)
			return
		}
		*dst = duration(&v)
	}
	set(&all.Request, t.Request, "request")
	set(&all.Response, t.BackendRequest, "backendRequest")
	rule.Timeouts = timeouts(all)
}

// timeouts is t, or nil when it sets nothing.
func timeouts(t *destinationpb.Timeouts) *destinationpb.Timeouts {
	if t.Request == nil && t.Response == nil && t.Idle == nil {
		return nil
	}
	return t
}

// duration is d as a proto Duration; nil for unset or zero (off).
func duration(d *time.Duration) *durationpb.Duration {
	if d == nil || *d == 0 {
		return nil
	}
	return durationpb.New(*d)
}

func budget(b routeannotations.Budget) *destinationpb.RetryBudget {
	return &destinationpb.RetryBudget{Ratio: b.Ratio, MinPerSecond: b.MinPerSecond, Ttl: durationpb.New(b.TTL)}
}
