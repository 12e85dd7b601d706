package outboundpolicy

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"
)

// ControllerName is the controller Plexus writes route status as.
const ControllerName gatewayv1.GatewayController = "plexus.dev/policy-controller"

// HTTPRouteParents returns the status entries of r's Service parentRefs
// (other parentRefs are not Plexus's), conditions stamped now; see
// MergeParents to put them into r.Status.Parents.
func HTTPRouteParents(r *gatewayv1.HTTPRoute, services func(namespace, name string) (*corev1.Service, bool), now metav1.Time) []gatewayv1.RouteParentStatus {
	return parentStatuses(httpRoutes([]*gatewayv1.HTTPRoute{r})[0], services, now)
}

// GRPCRouteParents is HTTPRouteParents for a GRPCRoute.
func GRPCRouteParents(r *gatewayv1.GRPCRoute, services func(namespace, name string) (*corev1.Service, bool), now metav1.Time) []gatewayv1.RouteParentStatus {
	return parentStatuses(grpcRoutes([]*gatewayv1.GRPCRoute{r})[0], services, now)
}

// parentStatuses: per Service parentRef, Accepted (False/NoMatchingParent
// when the Service or its port does not exist, False/UnsupportedValue
// when the route is malformed) and ResolvedRefs (False with the first
// unresolved backendRef's reason, every one named in the message).
// ResolvedRefs is per parent: a backend in another namespace is permitted
// only when it is that parent (see env.permitted).
func parentStatuses(r gatewayRoute, services func(namespace, name string) (*corev1.Service, bool), now metav1.Time) []gatewayv1.RouteParentStatus {
	if services == nil {
		services = func(string, string) (*corev1.Service, bool) { return nil, false }
	}
	condition := func(typ gatewayv1.RouteConditionType, ok bool, reason gatewayv1.RouteConditionReason, message string) metav1.Condition {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		return metav1.Condition{Type: string(typ), Status: status, Reason: string(reason), Message: message, ObservedGeneration: r.meta.Generation, LastTransitionTime: now}
	}
	var out []gatewayv1.RouteParentStatus
	for _, ref := range r.parentRefs {
		if !isServiceParent(ref) {
			continue
		}
		// Of the parent, the problems depend on its namespace and name only.
		parent := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: parentNamespace(ref, r.meta.Namespace), Name: string(ref.Name)}}
		_, p := r.translate(&env{services: services, parent: parent})
		resolved := condition(gatewayv1.RouteConditionResolvedRefs, true, gatewayv1.RouteReasonResolvedRefs, "")
		if len(p.unresolved) > 0 {
			msgs := make([]string, len(p.unresolved))
			for i, u := range p.unresolved {
				msgs[i] = u.message
			}
			resolved = condition(gatewayv1.RouteConditionResolvedRefs, false, p.unresolved[0].reason, strings.Join(msgs, "; "))
		}
		accepted := condition(gatewayv1.RouteConditionAccepted, true, gatewayv1.RouteReasonAccepted, "")
		if missing := missingParent(ref, r.meta.Namespace, services); missing != "" {
			accepted = condition(gatewayv1.RouteConditionAccepted, false, gatewayv1.RouteReasonNoMatchingParent, missing)
		} else if !p.accepted() {
			accepted = condition(gatewayv1.RouteConditionAccepted, false, gatewayv1.RouteReasonUnsupportedValue, p.invalidMessage())
		}
		out = append(out, gatewayv1.RouteParentStatus{
			ParentRef:      *ref.DeepCopy(),
			ControllerName: ControllerName,
			Conditions:     []metav1.Condition{accepted, resolved},
		})
	}
	return out
}

// missingParent says what of the parent Service does not exist, or "".
func missingParent(ref gatewayv1.ParentReference, routeNamespace string, services func(namespace, name string) (*corev1.Service, bool)) string {
	ns := parentNamespace(ref, routeNamespace)
	svc, ok := services(ns, string(ref.Name))
	switch {
	case !ok:
		return fmt.Sprintf("Service %s/%s not found", ns, ref.Name)
	case ref.Port != nil && !hasPort(svc, *ref.Port):
		return fmt.Sprintf("Service %s/%s has no port %d", ns, ref.Name, *ref.Port)
	}
	return ""
}

// MergeParents returns existing with Plexus's entries replaced by ours
// (the other controllers' entries untouched, in their order, ours after
// them) and whether that changed anything. A condition whose status did
// not change keeps its lastTransitionTime, so that a status computed
// again with the same outcome is no change and is not written again.
// Neither existing nor ours is modified.
func MergeParents(existing, ours []gatewayv1.RouteParentStatus) ([]gatewayv1.RouteParentStatus, bool) {
	var others, old []gatewayv1.RouteParentStatus
	for _, s := range existing {
		if s.ControllerName == ControllerName {
			old = append(old, s)
		} else {
			others = append(others, s)
		}
	}
	merged := make([]gatewayv1.RouteParentStatus, len(ours))
	for i, s := range ours {
		merged[i] = *s.DeepCopy()
		prev := findParent(old, s.ParentRef)
		if prev == nil {
			continue
		}
		for j := range merged[i].Conditions {
			c := &merged[i].Conditions[j]
			if p := findCondition(prev.Conditions, c.Type); p != nil && p.Status == c.Status {
				c.LastTransitionTime = p.LastTransitionTime
			}
		}
	}
	if equality.Semantic.DeepEqual(old, merged) || (len(old) == 0 && len(merged) == 0) {
		return existing, false
	}
	return append(others, merged...), true
}

func findParent(ss []gatewayv1.RouteParentStatus, ref gatewayv1.ParentReference) *gatewayv1.RouteParentStatus {
	for i := range ss {
		if equality.Semantic.DeepEqual(ss[i].ParentRef, ref) {
			return &ss[i]
		}
	}
	return nil
}

func findCondition(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}
