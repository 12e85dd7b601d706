package multiclusterv1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// DecodeLink converts a Link from a dynamic client or informer. A field
// the type does not know is an error: a Link half understood could mirror
// what it does not mean to.
func DecodeLink(u *unstructured.Unstructured) (*Link, error) {
	var l Link
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(u.Object, &l, true); err != nil {
		return nil, fmt.Errorf("decoding %s %s/%s: %w", u.GetKind(), u.GetNamespace(), u.GetName(), err)
	}
	return &l, nil
}
