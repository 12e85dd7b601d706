package apiservertest

import (
	"context"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// BindShippedRole creates the ClusterRole of deploy/plexus-node/rbac.yaml
// and binds it to AgentUser, so a test acts with exactly the permissions
// the node agent ships with.
func (a *Server) BindShippedRole(t testing.TB) {
	t.Helper()
	a.BindRole(t, "plexus-node/rbac.yaml")
}

// BindRole creates the ClusterRole that is the first document of file (a
// path under deploy/) and binds it to AgentUser.
func (a *Server) BindRole(t testing.TB, file string) {
	t.Helper()
	b := shipped(t, file)
	var role rbacv1.ClusterRole
	if err := yaml.UnmarshalStrict([]byte(strings.Split(string(b), "\n---\n")[0]), &role); err != nil {
		t.Fatalf("decoding the ClusterRole of %s: %v", file, err)
	}
	ctx := context.Background()
	admin := a.Client(t, AdminToken)
	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "plexus-test-agent-" + role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: AgentUser}},
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
