package mirror

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// result is how one remote Service's mirror went.
type result struct{ reason, message string }

// A mirror's reasons.
const (
	reasonMirrored         = "Mirrored"
	reasonNameCollision    = "NameCollision"
	reasonMissingNamespace = "MissingNamespace"
	reasonRefused          = "LinkRefused"
	reasonError            = "Error"
)

// linkStatus is Link l's status: its conditions from its credentials
// (credErr), its remote watch r (nil: none yet) and the watch meant to
// replace it (next, nil: none), and one entry per selected remote
// Service. Transition times are kept from l's status where a condition
// did not change.
func linkStatus(l *mc.Link, r, next *remote, credErr *credentialsError, now time.Time) mc.LinkStatus {
	st := mc.LinkStatus{ObservedGeneration: l.Generation, Conditions: slices.Clone(l.Status.Conditions)}
	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason, Message: msg,
			ObservedGeneration: l.Generation, LastTransitionTime: metav1.NewTime(now)})
	}
	// Ready is False with the first failing condition's reason.
	ready, readyReason, readyMsg := true, "Ready", "mirroring"
	check := func(typ string, ok bool, reason, msg string) {
		set(typ, ok, reason, msg)
		if !ok && ready {
			ready, readyReason, readyMsg = false, reason, msg
		}
	}
	if credErr != nil {
		check(mc.ConditionCredentialsValid, false, credErr.reason, credErr.message)
	} else {
		check(mc.ConditionCredentialsValid, true, "Valid", "")
	}
	switch {
	case r == nil:
		check(mc.ConditionRemoteReachable, false, "NotWatched", "no watch of the remote cluster")
	case r.unreachable(now) != nil:
		check(mc.ConditionRemoteReachable, false, "Unreachable", fmt.Sprintf("the remote API server fails: %v", r.unreachable(now)))
	case !r.synced():
		check(mc.ConditionRemoteReachable, false, "Syncing", "waiting for the remote Services")
	case next != nil && next.unreachable(now) != nil:
		check(mc.ConditionRemoteReachable, false, "Unreachable", fmt.Sprintf("the new credentials fail (the old ones still serve): %v", next.unreachable(now)))
	default:
		check(mc.ConditionRemoteReachable, true, "Synced", "")
	}
	switch {
	case r == nil || r.trustAt.IsZero():
	case r.trust.refused:
		check(mc.ConditionTrustVerified, false, "NoCommonAnchor", r.trust.message)
	case r.trust.unknown:
		apimeta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: mc.ConditionTrustVerified, Status: metav1.ConditionUnknown,
			Reason: "Unverified", Message: r.trust.message, ObservedGeneration: l.Generation, LastTransitionTime: metav1.NewTime(now)})
	default:
		check(mc.ConditionTrustVerified, true, "CommonAnchor", "")
	}
	set(mc.ConditionReady, ready, readyReason, readyMsg)
	if r == nil {
		return st
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for key, res := range r.results {
		ns, name, _ := strings.Cut(key, "/")
		ms := mc.MirrorStatus{RemoteRef: mc.ObjectRef{Namespace: ns, Name: name}, LocalRef: mc.ObjectRef{Namespace: ns, Name: name + "-" + l.Spec.ClusterName}}
		if svc, err := r.services.Services(ns).Get(name); err == nil && federated(svc) {
			ms.LocalRef.Name = federatedName(name)
		}
		for _, old := range l.Status.MirrorServices {
			if old.RemoteRef == ms.RemoteRef {
				ms.Conditions = slices.Clone(old.Conditions)
			}
		}
		apimeta.SetStatusCondition(&ms.Conditions, metav1.Condition{Type: mc.ConditionMirrored, Status: map[bool]metav1.ConditionStatus{true: metav1.ConditionTrue, false: metav1.ConditionFalse}[res.reason == reasonMirrored],
			Reason: res.reason, Message: res.message, ObservedGeneration: l.Generation, LastTransitionTime: metav1.NewTime(now)})
		st.MirrorServices = append(st.MirrorServices, ms)
	}
	slices.SortFunc(st.MirrorServices, func(a, b mc.MirrorStatus) int {
		return strings.Compare(a.RemoteRef.Namespace+"/"+a.RemoteRef.Name, b.RemoteRef.Namespace+"/"+b.RemoteRef.Name)
	})
	return st
}

// statusEqual compares two statuses as the API stores them (times to the
// second).
func statusEqual(a, b mc.LinkStatus) bool {
	ra, errA := toUnstructured(a)
	rb, errB := toUnstructured(b)
	return errA == nil && errB == nil && equality.Semantic.DeepEqual(ra, rb)
}

func toUnstructured(status mc.LinkStatus) (map[string]any, error) {
	return runtime.DefaultUnstructuredConverter.ToUnstructured(&status)
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
