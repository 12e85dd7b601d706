package outboundpolicy

import (
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/plexus-mesh/plexus/control/serviceprofile"
	"github.com/plexus-mesh/plexus/mesh/api/destinationpb"
	"github.com/plexus-mesh/plexus/mesh/api/routeannotations"
)

// ProfileRetryLimit is the limit of a retryable ServiceProfile route:
// none but the retry budget, as in Linkerd's proxy, whose profile retry
// policy (linkerd/app/outbound/src/http/retry.rs) retries each failure
// for as long as the budget allows a withdrawal and counts no attempts.
// The Service's retry annotations do not apply to profile routes (Linkerd:
// "proxies will use the ServiceProfile retry configuration and ignore any
// retry annotations").
const ProfileRetryLimit = math.MaxUint32

// profileGroup is the group of the ServiceProfile route refs.
const profileGroup = "plexus.dev"

// profileRoutes translates a valid profile, as Linkerd does: one route
// per profile route, in its order (first match wins), then a default
// route matching every request with neither retries nor timeouts. Every
// rule sends to the dstOverrides, or to the parent Service without them.
// No annotation of the Service applies.
func (e *env) profileRoutes(sp *serviceprofile.ServiceProfile) []*destinationpb.OutboundRoute {
	backends := func() []*destinationpb.Backend {
		if len(sp.Spec.DstOverrides) == 0 {
			return []*destinationpb.Backend{e.parentBackend()}
		}
		out := make([]*destinationpb.Backend, 0, len(sp.Spec.DstOverrides))
		for _, dst := range sp.Spec.DstOverrides {
			out = append(out, e.overrideBackend(sp.Namespace, dst.Authority, dst.Weight))
		}
		return out
	}
	budget := profileBudget(sp.Spec.RetryBudget)
	var out []*destinationpb.OutboundRoute
	for _, r := range sp.Spec.Routes {
		rule := &destinationpb.OutboundRule{
			Matches:         []*destinationpb.RouteMatch{{Condition: condition(r.Condition)}},
			Backends:        backends(),
			ResponseClasses: each(r.ResponseClasses, responseClass),
		}
		if d, err := time.ParseDuration(r.Timeout); err == nil && d > 0 {
			rule.Timeouts = &destinationpb.Timeouts{Request: durationpb.New(d)}
		}
		if r.IsRetryable {
			rule.Retry = &destinationpb.RetryPolicy{Failures: true, Limit: ProfileRetryLimit, Budget: budget}
		}
		out = append(out, &destinationpb.OutboundRoute{
			Ref:   &destinationpb.ResourceRef{Group: profileGroup, Kind: serviceprofile.Kind, Namespace: sp.Namespace, Name: r.Name},
			Rules: []*destinationpb.OutboundRule{rule},
		})
	}
	return append(out, &destinationpb.OutboundRoute{
		Ref:   &destinationpb.ResourceRef{Kind: "default", Name: "http"},
		Rules: []*destinationpb.OutboundRule{{Backends: backends()}},
	})
}

// profileBudget is spec.retryBudget, Linkerd's defaults (0.2, 10, 10s)
// without it.
func profileBudget(b *serviceprofile.RetryBudget) *destinationpb.RetryBudget {
	out := budget(routeannotations.DefaultBudget)
	if b == nil {
		return out
	}
	// The float32 ratio as written (0.2, not 0.20000000298023224).
	out.Ratio, _ = strconv.ParseFloat(strconv.FormatFloat(float64(b.RetryRatio), 'g', -1, 32), 64)
	out.MinPerSecond = b.MinRetriesPerSecond
	if ttl, err := time.ParseDuration(b.TTL); err == nil {
		out.Ttl = durationpb.New(ttl)
	}
	return out
}

// overrideBackend is the dstOverrides authority
// "<svc>.<ns>.svc.<cluster-domain>:<port>" as a backend; weight in
// milli-units ("500m" → 500, "1" → 1000), of a profile in
// profileNamespace. An authority that is not a Service of this cluster, a
// Service that does not exist, or one that is neither in profileNamespace
// nor the parent Service (the rule of Gateway backendRefs, see permitted)
// is a backend with Failure set.
func (e *env) overrideBackend(profileNamespace, authority string, weight resource.Quantity) *destinationpb.Backend {
	w := uint32(min(max(weight.MilliValue(), 0), math.MaxUint32))
	namespace, name, port, ok := e.parseAuthority(authority)
	if !ok {
		return &destinationpb.Backend{Weight: w, Failure: fmt.Sprintf("dstOverrides authority %q is not <svc>.<ns>.svc.%s:<port>", authority, e.clusterDomain)}
	}
	if !e.permitted(profileNamespace, namespace, name) {
		return &destinationpb.Backend{Ref: serviceRef(namespace, name, port), Weight: w, Failure: notPermitted("ServiceProfile", namespace, name)}
	}
	b, _ := e.serviceBackend(namespace, name, port, w)
	return b
}

func (e *env) parseAuthority(authority string) (namespace, name string, port int32, ok bool) {
	host, portStr, err := net.SplitHostPort(authority)
	if err != nil {
		return "", "", 0, false
	}
	p, err := strconv.ParseUint(portStr, 10, 16)
	svcNS, found := strings.CutSuffix(strings.TrimSuffix(host, "."), ".svc."+e.clusterDomain)
	name, namespace, twoLabels := strings.Cut(svcNS, ".")
	if err != nil || p == 0 || !found || !twoLabels || name == "" || namespace == "" || strings.Contains(namespace, ".") {
		return "", "", 0, false
	}
	return namespace, name, int32(p), true
}

// condition translates a request condition; several fields set in one
// node must all hold (Linkerd's destination does the same).
func condition(m *serviceprofile.RequestMatch) *destinationpb.Condition {
	if m == nil {
		return nil
	}
	var cs []*destinationpb.Condition
	if len(m.All) > 0 {
		cs = append(cs, &destinationpb.Condition{Kind: &destinationpb.Condition_All{All: &destinationpb.Conditions{Conditions: each(m.All, condition)}}})
	}
	if len(m.Any) > 0 {
		cs = append(cs, &destinationpb.Condition{Kind: &destinationpb.Condition_Any{Any: &destinationpb.Conditions{Conditions: each(m.Any, condition)}}})
	}
	if m.Method != "" {
		cs = append(cs, &destinationpb.Condition{Kind: &destinationpb.Condition_Method{Method: m.Method}})
	}
	if m.Not != nil {
		cs = append(cs, &destinationpb.Condition{Kind: &destinationpb.Condition_Not{Not: condition(m.Not)}})
	}
	if m.PathRegex != "" {
		cs = append(cs, &destinationpb.Condition{Kind: &destinationpb.Condition_PathRegex{PathRegex: m.PathRegex}})
	}
	return oneOrAll(cs, func(cs []*destinationpb.Condition) *destinationpb.Condition {
		return &destinationpb.Condition{Kind: &destinationpb.Condition_All{All: &destinationpb.Conditions{Conditions: cs}}}
	})
}

// each is f applied to every element of in.
func each[S, T any](in []S, f func(S) T) []T {
	out := make([]T, len(in))
	for i, v := range in {
		out[i] = f(v)
	}
	return out
}

// oneOrAll is the single node of ns, or all wrapping them.
func oneOrAll[T any](ns []T, all func([]T) T) T {
	if len(ns) == 1 {
		return ns[0]
	}
	return all(ns)
}

func responseClass(rc *serviceprofile.ResponseClass) *destinationpb.ResponseClass {
	return &destinationpb.ResponseClass{Condition: responseMatch(rc.Condition), IsFailure: rc.IsFailure}
}

// responseMatch translates a response condition, several fields in one
// node all holding; an open status bound (0) becomes 100 or 599, so the
// proxy needs no rule for it.
func responseMatch(m *serviceprofile.ResponseMatch) *destinationpb.ResponseMatch {
	if m == nil {
		return nil
	}
	var ms []*destinationpb.ResponseMatch
	if len(m.All) > 0 {
		ms = append(ms, &destinationpb.ResponseMatch{Kind: &destinationpb.ResponseMatch_All{All: &destinationpb.ResponseMatches{Matches: each(m.All, responseMatch)}}})
	}
	if len(m.Any) > 0 {
		ms = append(ms, &destinationpb.ResponseMatch{Kind: &destinationpb.ResponseMatch_Any{Any: &destinationpb.ResponseMatches{Matches: each(m.Any, responseMatch)}}})
	}
	if s := m.Status; s != nil {
		r := &destinationpb.StatusRange{Min: s.Min, Max: s.Max}
		if r.Min == 0 {
			r.Min = 100
		}
		if r.Max == 0 {
			r.Max = 599
		}
		ms = append(ms, &destinationpb.ResponseMatch{Kind: &destinationpb.ResponseMatch_Status{Status: r}})
	}
	if m.Not != nil {
		ms = append(ms, &destinationpb.ResponseMatch{Kind: &destinationpb.ResponseMatch_Not{Not: responseMatch(m.Not)}})
	}
	return oneOrAll(ms, func(ms []*destinationpb.ResponseMatch) *destinationpb.ResponseMatch {
		return &destinationpb.ResponseMatch{Kind: &destinationpb.ResponseMatch_All{All: &destinationpb.ResponseMatches{Matches: ms}}}
	})
}
