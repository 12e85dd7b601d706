package destination

import (
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
	gatewayv1 "sigs.k8s.io/gateway-api/apis/v1"

	policyv1alpha1 "github.com/plexus-mesh/plexus/mesh/api/policy/v1alpha1"
)

// Reads of the inbound side's caches (InboundReads), and which streams a
// changed object concerns. Objects from a cache are shared: never modify
// them.

func (in *inbound) Namespace(name string) *corev1.Namespace {
	ns, _ := byKey[*corev1.Namespace](in.namespaces, name)
	return ns
}

func (in *inbound) Servers(ns string) []*policyv1alpha1.Server {
	return byIndex[*policyv1alpha1.Server](in.serverInf, cache.NamespaceIndex, ns)
}

func (in *inbound) AuthorizationPolicies(ns string) []*policyv1alpha1.AuthorizationPolicy {
	return byIndex[*policyv1alpha1.AuthorizationPolicy](in.authzInf, cache.NamespaceIndex, ns)
}

func (in *inbound) HTTPLocalRateLimitPolicies(ns string) []*policyv1alpha1.HTTPLocalRateLimitPolicy {
	return byIndex[*policyv1alpha1.HTTPLocalRateLimitPolicy](in.rateLimitInf, cache.NamespaceIndex, ns)
}

func (in *inbound) MeshTLSAuthentication(ns, name string) (*policyv1alpha1.MeshTLSAuthentication, bool) {
	return byKey[*policyv1alpha1.MeshTLSAuthentication](in.meshTLSInf, ns+"/"+name)
}

func (in *inbound) NetworkAuthentication(ns, name string) (*policyv1alpha1.NetworkAuthentication, bool) {
	return byKey[*policyv1alpha1.NetworkAuthentication](in.networkInf, ns+"/"+name)
}

func (in *inbound) ServerHTTPRoutes(server string) []*gatewayv1.HTTPRoute {
	return byIndex[*gatewayv1.HTTPRoute](in.p.httpRoutes, indexServerParent, server)
}

func (in *inbound) ServerGRPCRoutes(server string) []*gatewayv1.GRPCRoute {
	return byIndex[*gatewayv1.GRPCRoute](in.p.grpcRoutes, indexServerParent, server)
}

// byIndex returns the T objects of inf under index value v, sorted by
// namespace and name (nil informer: none; an object of another type, one
// that could not be decoded, is skipped).
func byIndex[T metav1.Object](inf cache.SharedIndexInformer, index, v string) []T {
	if inf == nil {
		return nil
	}
	objs, _ := inf.GetIndexer().ByIndex(index, v)
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	sortByName(out)
	return out
}

// sortByName sorts objects by namespace, then name.
func sortByName[T interface {
	GetNamespace() string
	GetName() string
}](objs []T) {
	slices.SortFunc(objs, func(a, b T) int {
		if c := strings.Compare(a.GetNamespace(), b.GetNamespace()); c != 0 {
			return c
		}
		return strings.Compare(a.GetName(), b.GetName())
	})
}

// byKey returns the T object of inf with key "ns/name" (or "name").
func byKey[T any](inf cache.SharedIndexInformer, key string) (T, bool) {
	var zero T
	if inf == nil {
		return zero, false
	}
	obj, ok, err := inf.GetIndexer().GetByKey(key)
	if err != nil || !ok {
		return zero, false
	}
	t, ok := obj.(T)
	return t, ok
}

// indexServerParents indexes an HTTPRoute or GRPCRoute by its Server
// parents.
func indexServerParents(obj any) ([]string, error) {
	switch r := obj.(type) {
	case *gatewayv1.HTTPRoute:
		return serverParents(r.Spec.ParentRefs, r.Namespace), nil
	case *gatewayv1.GRPCRoute:
		return serverParents(r.Spec.ParentRefs, r.Namespace), nil
	}
	return nil, nil
}

// indexAuthentications indexes an AuthorizationPolicy by the
// authentications it requires ("Kind/ns/name").
func indexAuthentications(obj any) ([]string, error) {
	ap, ok := obj.(*policyv1alpha1.AuthorizationPolicy)
	if !ok {
		return nil, nil
	}
	var out []string
	for _, r := range ap.Spec.RequiredAuthenticationRefs {
		ns := r.Namespace
		if ns == "" {
			ns = ap.Namespace
		}
		out = append(out, r.Kind+"/"+ns+"/"+r.Name)
	}
	return out, nil
}

func kindOf(obj any) string {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		return u.GetKind()
	}
	return ""
}

// policyNamespaces are the namespaces whose streams ap may change: its
// own, and those of the Servers of the route it targets.
func (in *inbound) policyNamespaces(ap *policyv1alpha1.AuthorizationPolicy) []string {
	out := []string{ap.Namespace}
	t := ap.Spec.TargetRef
	key := ap.Namespace + "/" + t.Name
	switch {
	case t.IsKind(policyv1alpha1.GatewayGroup, policyv1alpha1.HTTPRouteKind):
		if r, ok := byKey[*gatewayv1.HTTPRoute](in.p.httpRoutes, key); ok {
			out = append(out, namespacesOf(serverParents(r.Spec.ParentRefs, r.Namespace))...)
		}
	case t.IsKind(policyv1alpha1.GatewayGroup, policyv1alpha1.GRPCRouteKind):
		if r, ok := byKey[*gatewayv1.GRPCRoute](in.p.grpcRoutes, key); ok {
			out = append(out, namespacesOf(serverParents(r.Spec.ParentRefs, r.Namespace))...)
		}
	}
	return out
}

// referrerNamespaces are the namespaces whose streams the authentication
// kind ns/name may change: those of the AuthorizationPolicies requiring
// it.
func (in *inbound) referrerNamespaces(kind, ns, name string) []string {
	var out []string
	for _, ap := range byIndex[*policyv1alpha1.AuthorizationPolicy](in.authzInf, indexAuthentication, kind+"/"+ns+"/"+name) {
		out = append(out, in.policyNamespaces(ap)...)
	}
	return out
}

// namespacesOf returns the namespaces of "ns/name" keys.
func namespacesOf(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i], _, _ = strings.Cut(k, "/")
	}
	return out
}
