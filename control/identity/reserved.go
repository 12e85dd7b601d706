package identity

import (
	"context"
	"fmt"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/plexus-mesh/plexus/mesh/identity/spiffe"
)

// The mesh trusts some identities for itself: every proxy serves its tap
// API to plexus-viz/plexus-tap alone. Whoever can create that namespace
// and service account could otherwise get the identity from this service
// and tap every proxy. So the namespaces of such identities are reserved:
// identity certifies a service account in one only while an extension
// installed by the mesh's operator declares it, with a ConfigMap in the
// control plane's own namespace (which tenants cannot write). The
// ValidatingAdmissionPolicy plexus-reserved-namespaces (deploy/) keeps
// anyone without create on reservednamespaces.plexus.dev from creating
// the namespace in the first place.

// DefaultReservedNamespaces are the namespaces of the identities the mesh
// trusts for itself (--reserved-namespaces).
var DefaultReservedNamespaces = []string{"plexus-viz"}

// DeclarationName is the ConfigMap, in the control plane's namespace,
// that declares an extension's reserved namespace ns; its data key
// "namespace" must name ns.
func DeclarationName(ns string) string { return "plexus-extension-" + ns }

// checkReserved refuses id when its namespace is reserved and no
// extension declares it.
func (s *Server) checkReserved(ctx context.Context, id spiffe.ID) error {
	if !slices.Contains(s.cfg.ReservedNamespaces, id.Namespace) {
		return nil
	}
	name := DeclarationName(id.Namespace)
	cm, err := s.client.CoreV1().ConfigMaps(s.cfg.Namespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%w: %s is in namespace %s, reserved for a Plexus extension that is not installed (no ConfigMap %s/%s)",
			ErrReservedNamespace, id, id.Namespace, s.cfg.Namespace, name)
	case err != nil:
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("%w: reading ConfigMap %s/%s: %w", ErrReservedCheckFailed, s.cfg.Namespace, name, err)
	case cm.Data["namespace"] != id.Namespace:
		return fmt.Errorf("%w: ConfigMap %s/%s names namespace %q, not %s", ErrReservedNamespace, s.cfg.Namespace, name, cm.Data["namespace"], id.Namespace)
	}
	return nil
}
