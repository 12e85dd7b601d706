package deploy

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// TestMulticlusterObjects: the multicluster extension's manifests (but its
// CRD, which mesh/api/multicluster tests) decode strictly, its service
// mirror runs under Pod Security "restricted" as plexus-control's
// service-mirror command, and the RBAC gives what the code uses and no
// more: the mirror writes Services and the Links' finalizers and status
// and reads Secrets in its namespace only; destination reads the
// credentials Secrets there; a linked cluster's credentials read and
// never write.
func TestMulticlusterObjects(t *testing.T) {
	var objs []runtime.Object
	for _, f := range []string{"namespace", "service-mirror", "destination-rbac", "remote-access"} {
		objs = append(objs, manifestObjects(t, "plexus-multicluster/"+f+".yaml")...)
	}
	dep := vizObject[*appsv1.Deployment](t, objs)
	checkRestricted(t, dep.Spec.Template.Spec)
	if c := dep.Spec.Template.Spec.Containers; len(c) != 1 || len(c[0].Args) == 0 || c[0].Args[0] != "service-mirror" {
		t.Errorf("service mirror's container runs %v, want plexus-control service-mirror", c)
	}
	rules := map[string][]rbacv1.PolicyRule{}
	for _, o := range objs {
		switch r := o.(type) {
		case *rbacv1.ClusterRole:
			rules[r.Name] = r.Rules
		case *rbacv1.Role:
			rules[r.Namespace+"/"+r.Name] = r.Rules
		}
	}
	for role, want := range map[string][]string{
		"plexus-multicluster-service-mirror": {"/services:create", "/services:delete", "/services:get", "/services:list", "/services:update", "/services:watch",
			"discovery.k8s.io/endpointslices:create", "discovery.k8s.io/endpointslices:delete", "discovery.k8s.io/endpointslices:get", "discovery.k8s.io/endpointslices:update"},
		"plexus-multicluster/plexus-service-mirror":              {"/secrets:get", "/secrets:update", "multicluster.plexus.dev/links/finalizers:update", "multicluster.plexus.dev/links/status:update", "multicluster.plexus.dev/links:get", "multicluster.plexus.dev/links:list", "multicluster.plexus.dev/links:patch", "multicluster.plexus.dev/links:watch"},
		"plexus-multicluster/plexus-destination-remote-clusters": {"/secrets:get", "/secrets:list", "/secrets:watch"},
		"plexus-system/plexus-multicluster-remote-access":        {"/configmaps:get"},
		"plexus-system/plexus-service-mirror-anchors":            {"/configmaps:get"},
		"plexus-multicluster/plexus-multicluster-remote-access":  {"/serviceaccounts/token:create"},
		"plexus-multicluster-remote-access":                      {"/pods:list", "/pods:watch", "/services:list", "/services:watch", "discovery.k8s.io/endpointslices:list", "discovery.k8s.io/endpointslices:watch"},
	} {
		var got []string
		for _, r := range rules[role] {
			for _, g := range r.APIGroups {
				for _, res := range r.Resources {
					for _, v := range r.Verbs {
						got = append(got, g+"/"+res+":"+v)
					}
				}
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s grants %v, want %v", role, got, want)
		}
	}
	// A linked cluster reads the anchors' ConfigMap, no other, and mints
	// tokens of its own account only.
	for role, want := range map[string]string{
		"plexus-system/plexus-multicluster-remote-access":       "plexus-identity-trust-anchors",
		"plexus-system/plexus-service-mirror-anchors":           "plexus-identity-trust-anchors",
		"plexus-multicluster/plexus-multicluster-remote-access": "plexus-mc-remote-access",
	} {
		for _, r := range rules[role] {
			if !slices.Equal(r.ResourceNames, []string{want}) {
				t.Errorf("%s grants on %v, want only %s", role, r.ResourceNames, want)
			}
		}
	}
}
