package mccli

import (
	"errors"
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/plexus-mesh/plexus/control/cli/extension"
	mc "github.com/plexus-mesh/plexus/mesh/api/multicluster/v1alpha1"
)

// remoteAccessRole is the ClusterRole, and the Roles' name, that install
// grants RemoteAccessAccount (deploy/plexus-multicluster/remote-access.yaml).
const remoteAccessRole = "plexus-multicluster-remote-access"

// Allow writes, for kubectl apply in the cluster to link to, a service
// account of its own for one linking cluster, granted what
// RemoteAccessAccount is: read Services, EndpointSlices and Pods, create
// tokens of itself only (renewal), and get the trust anchors ConfigMap.
// `link --service-account-name` then mints that cluster's credentials for
// it: the linked cluster's audit log names who reads, and deleting the
// account (kubectl delete -f of the same output) ends that one link's
// access, and none other's.
func Allow(account string, w io.Writer) error {
	if msgs := validation.IsDNS1123Subdomain(account); len(msgs) > 0 {
		return fmt.Errorf("--service-account-name %q: want a DNS subdomain name", account)
	}
	if account == RemoteAccessAccount {
		return errors.New("--service-account-name " + account + ": install grants it already")
	}
	name := remoteAccessRole + "-" + account
	if len(name) > validation.DNS1123SubdomainMaxLength {
		return fmt.Errorf("--service-account-name %q: too long for its bindings' names (%s)", account, name)
	}
	labels := extension.Object{"app.kubernetes.io/part-of": "plexus-multicluster"}
	meta := func(name, ns string) extension.Object {
		m := extension.Object{"name": name, "labels": labels}
		if ns != "" {
			m["namespace"] = ns
		}
		return m
	}
	subjects := []any{extension.Object{"kind": "ServiceAccount", "name": account, "namespace": mc.Namespace}}
	binding := func(kind, ns, roleKind, role string) extension.Object {
		return extension.Object{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": kind, "metadata": meta(name, ns),
			"roleRef": extension.Object{"apiGroup": "rbac.authorization.k8s.io", "kind": roleKind, "name": role}, "subjects": subjects}
	}
	objs := []extension.Object{
		{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(account, mc.Namespace)},
		binding("ClusterRoleBinding", "", "ClusterRole", remoteAccessRole),
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": meta(name, mc.Namespace),
			"rules": []any{extension.Object{"apiGroups": []any{""}, "resources": []any{"serviceaccounts/token"},
				"resourceNames": []any{account}, "verbs": []any{"create"}}}},
		binding("RoleBinding", mc.Namespace, "Role", name),
		binding("RoleBinding", "plexus-system", "Role", remoteAccessRole),
	}
	header := fmt.Sprintf("# Service account %s/%s for one linking cluster: apply in this cluster, then\n# plexusctl multicluster link --service-account-name %s. Deleting these objects\n# ends that link's access.\n", mc.Namespace, account, account)
	if _, err := io.WriteString(w, header); err != nil {
		return err
	}
	return extension.Write(w, objs)
}
