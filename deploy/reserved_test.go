package deploy

import (
	"os"
	"strings"
	"testing"

	"github.com/plexus-mesh/plexus/control/identity"
)

// The reserved namespaces are named in three places that must agree:
// identity's default (--reserved-namespaces), the admission policy that
// keeps them from being created by anyone, and identity's right to read
// each one's declaration; the viz extension declares its own.
func TestReservedNamespacesAgree(t *testing.T) {
	read := func(name string) string {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	policy, rbac, viz := read("plexus-control/reserved-namespaces-policy.yaml"), read("plexus-control/rbac.yaml"), read("plexus-viz/namespace.yaml")
	for _, ns := range identity.DefaultReservedNamespaces {
		if !strings.Contains(policy, "object.metadata.name in ['"+ns+"']") {
			t.Errorf("reserved-namespaces-policy.yaml does not reserve %s", ns)
		}
		if !strings.Contains(rbac, "resourceNames: [\""+identity.DeclarationName(ns)+"\"]") {
			t.Errorf("identity may not read the declaration %s", identity.DeclarationName(ns))
		}
	}
	if !strings.Contains(viz, "name: "+identity.DeclarationName(vizNamespace)+"\n  namespace: plexus-system") || !strings.Contains(viz, "  namespace: "+vizNamespace+"\n") {
		t.Errorf("plexus-viz/namespace.yaml does not declare %s in plexus-system", vizNamespace)
	}
}
