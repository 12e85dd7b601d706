package tap

import (
	"context"
	"fmt"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/plexus-mesh/plexus/control/api/tapapi"
)

// authorize asks the API server whether u may tap resource/name in ns:
// verb watch on <resource>/tap in group tap.plexus.dev. It returns the
// reason when not.
func authorize(ctx context.Context, kube kubernetes.Interface, u User, t target) (bool, string, error) {
	extra := map[string]authorizationv1.ExtraValue{}
	for k, v := range u.Extra {
		extra[k] = v
	}
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Name, Groups: u.Groups, Extra: extra,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: t.namespace, Verb: tapapi.Verb, Group: tapapi.Group, Version: tapapi.Version,
			Resource: t.resource, Subresource: tapapi.Subresource, Name: t.name,
		},
	}}
	res, err := kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, "", fmt.Errorf("asking the API server whether %s may tap: %w", u.Name, err)
	}
	if res.Status.Allowed {
		return true, "", nil
	}
	reason := fmt.Sprintf("%s cannot %s %s/%s in API group %q in namespace %q", u.Name, tapapi.Verb, t.resource, tapapi.Subresource, tapapi.Group, t.namespace)
	if res.Status.Reason != "" {
		reason += ": " + res.Status.Reason
	}
	return false, reason, nil
}
