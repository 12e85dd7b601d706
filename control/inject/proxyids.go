package inject

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// checkProxyIDs refuses a meshed pod any of whose containers, other than
// the proxy, would run as the proxy's UID or GID: the redirect rules let
// the proxy's own traffic (its UID, or its GID) leave unredirected, so
// such a container's traffic would go around the proxy (no mTLS, no
// policy, no metrics). Regular, init and ephemeral containers count; a
// container's effective IDs are its own securityContext's, else the
// pod's. An ID set nowhere comes from the image, which admission cannot
// see. Only the primary GID counts: the rules match the socket's group,
// not supplementary groups (fsGroup, supplementalGroups).
func checkProxyIDs(spec *corev1.PodSpec, uid, gid uint32) error {
	var podUID, podGID *int64
	if sc := spec.SecurityContext; sc != nil {
		podUID, podGID = sc.RunAsUser, sc.RunAsGroup
	}
	var bad []string
	check := func(kind, name string, sc *corev1.SecurityContext) {
		if name == ContainerName {
			return
		}
		u, g := podUID, podGID
		if sc != nil && sc.RunAsUser != nil {
			u = sc.RunAsUser
		}
		if sc != nil && sc.RunAsGroup != nil {
			g = sc.RunAsGroup
		}
		var as []string
		if u != nil && *u == int64(uid) {
			as = append(as, fmt.Sprintf("UID %d", uid))
		}
		if g != nil && *g == int64(gid) {
			as = append(as, fmt.Sprintf("GID %d", gid))
		}
		if len(as) > 0 {
			bad = append(bad, fmt.Sprintf("%s %q runs as %s", kind, name, strings.Join(as, " and ")))
		}
	}
	for _, c := range spec.InitContainers {
		check("init container", c.Name, c.SecurityContext)
	}
	for _, c := range spec.Containers {
		check("container", c.Name, c.SecurityContext)
	}
	for _, c := range spec.EphemeralContainers {
		check("ephemeral container", c.Name, c.SecurityContext)
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%s: the proxy's own UID %d and GID %d are exempt from the mesh's redirect rules, "+
		"so its traffic would bypass the proxy; run it as another user and group "+
		"(or keep the pod out of the mesh with %s=disabled)", strings.Join(bad, "; "), uid, gid, AnnotationInject)
}
