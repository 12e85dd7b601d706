package tapservice

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/mesh/api/tapapi"
)

// authorize asks the API server whether u may tap resource/name in ns:
// verb watch on <resource>/tap in group tap.plexus.dev. It returns the
// reason when not.
func authorize(ctx context.Context, kube kubernetes.Interface, u User, t target) (bool, string, error) {
	st, err := review(ctx, kube, u, &authorizationv1.ResourceAttributes{
		Namespace: t.namespace, Verb: tapapi.Verb, Group: tapapi.Group, Version: tapapi.Version,
		Resource: t.resource, Subresource: tapapi.Subresource, Name: t.name,
	})
	if err != nil {
		return false, "", fmt.Errorf("asking the API server whether %s may tap: %w", u.Name, err)
	}
	if st.Allowed {
		return true, "", nil
	}
	reason := fmt.Sprintf("%s cannot %s %s/%s in API group %q in namespace %q", u.Name, tapapi.Verb, t.resource, tapapi.Subresource, tapapi.Group, t.namespace)
	if st.Reason != "" {
		reason += ": " + st.Reason
	}
	return false, reason, nil
}

// review asks the API server whether u has the right attrs names.
func review(ctx context.Context, kube kubernetes.Interface, u User, attrs *authorizationv1.ResourceAttributes) (authorizationv1.SubjectAccessReviewStatus, error) {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = v
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Name, Groups: u.Groups, Extra: extra, ResourceAttributes: attrs,
	}}
	res, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return authorizationv1.SubjectAccessReviewStatus{}, err
	}
	return res.Status, nil
}

// Filter rights. A tap's "to" and "from" ends name objects (a namespace,
// a resource in it, a label selector) that the service resolves to pod
// IPs with its own rights. In a namespace other than the tapped
// target's, the caller must be allowed to read them: what the service
// reads on the caller's behalf, no more (the caller could then list the
// pods' IPs and pass them as addresses). So:
//
//	a namespace or a selector:  list pods
//	pods/NAME:                  get pods NAME
//	services/NAME:              get services NAME, list pods
//	deployments (and the other apps kinds), jobs:  get KIND NAME, list pods
//	cronjobs/NAME:              get cronjobs NAME, list jobs, list pods
//
// each asked of the API server as a SubjectAccessReview for the caller,
// in the end's namespace. An end the caller may not read is answered as
// an end whose object is missing (notFoundError): the same status and
// message, so that the answer does not tell whether it exists. In the
// target's own namespace the tap right is taken to cover the filter.

// access is one right of a caller: verb on resource (of group) in
// namespace, name "" for any.
type access struct {
	namespace, verb, group, resource, name string
}

// readsOf lists the rights needed to resolve t (a filter's end) to pods.
func readsOf(t target) []access {
	listPods := access{t.namespace, "list", "", "pods", ""}
	switch t.resource {
	case "namespaces":
		return []access{listPods}
	case "pods":
		return []access{{t.namespace, "get", "", "pods", t.name}}
	case "services":
		return []access{{t.namespace, "get", "", "services", t.name}, listPods}
	case "jobs":
		return []access{{t.namespace, "get", "batch", "jobs", t.name}, listPods}
	case "cronjobs":
		return []access{{t.namespace, "get", "batch", "cronjobs", t.name}, {t.namespace, "list", "batch", "jobs", ""}, listPods}
	}
	return []access{{t.namespace, "get", "apps", t.resource, t.name}, listPods}
}

// rightsFunc reports whether the tap's caller has every right of as.
type rightsFunc func(ctx context.Context, as []access) (bool, error)

// callerRights asks the API server about u's rights, one review per
// right, until one is denied.
func callerRights(kube kubernetes.Interface, u User) rightsFunc {
	return func(ctx context.Context, as []access) (bool, error) {
		for _, a := range as {
			st, err := review(ctx, kube, u, &authorizationv1.ResourceAttributes{
				Namespace: a.namespace, Verb: a.verb, Group: a.group, Resource: a.resource, Name: a.name})
			if err != nil {
				return false, &reviewError{fmt.Errorf("asking the API server whether %s may %s %s in namespace %q: %w", u.Name, a.verb, a.resource, a.namespace, err)}
			}
			if !st.Allowed {
				return false, nil
			}
		}
		return true, nil
	}
}

// reviewError: the API server did not answer a SubjectAccessReview (a
// 500, which tells nothing of the objects).
type reviewError struct{ err error }

func (e *reviewError) Error() string { return e.err.Error() }
func (e *reviewError) Unwrap() error { return e.err }

// notFoundError: what a filter's end names is missing, or the caller may
// not read it; one message for both.
type notFoundError struct{ msg string }

func (e *notFoundError) Error() string { return e.msg }

// notFound is the answer for an end naming t (a missing object, or one
// the caller may not read).
func (e end) notFound(t target) error {
	what := fmt.Sprintf("%s %q in namespace %q", t.resource, t.name, t.namespace)
	if t.resource == "namespaces" {
		what = fmt.Sprintf("namespace %q", t.namespace)
	}
	need := ""
	for i, a := range readsOf(t) {
		if i > 0 {
			need += " and "
		}
		need += a.verb + " on " + a.resource
	}
	return &notFoundError{fmt.Sprintf("%s: %s is not found, or you may not read it (a filter on it needs %s there)", e.field, what, need)}
}
