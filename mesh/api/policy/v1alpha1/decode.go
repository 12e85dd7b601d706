package policyv1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// Decode converts an object from a dynamic client or informer into one of
// this package's types (a pointer). A value of the wrong type is an error;
// so is a field the type does not know, except in a Server: a Server only
// narrows who gets in, so one with a field from a newer version still
// applies by what this version knows (ignoring it would fall back to the
// default policy, often all-unauthenticated), while an authorization or a
// rate limit half understood could grant more than it says.
func Decode(u *unstructured.Unstructured, into any) error {
	_, server := into.(*Server)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, into, !server); err != nil {
		return fmt.Errorf("decoding %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return nil
}
