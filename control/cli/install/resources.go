package install

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// resources maps the kinds install renders to their API resources.
var resources = map[string]string{
	"Namespace":                      "namespaces",
	"CustomResourceDefinition":       "customresourcedefinitions",
	"Secret":                         "secrets",
	"ConfigMap":                      "configmaps",
	"ServiceAccount":                 "serviceaccounts",
	"ClusterRole":                    "clusterroles",
	"ClusterRoleBinding":             "clusterrolebindings",
	"Role":                           "roles",
	"RoleBinding":                    "rolebindings",
	"Service":                        "services",
	"Deployment":                     "deployments",
	"PodDisruptionBudget":            "poddisruptionbudgets",
	"DaemonSet":                      "daemonsets",
	"MutatingWebhookConfiguration":   "mutatingwebhookconfigurations",
	"ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
	// The admission policies that fix pod annotations at admission and
	// keep the node agent to its own taint.
	"ValidatingAdmissionPolicy":        "validatingadmissionpolicies",
	"ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
}

// Resource is the API resource of the object r names.
func (r Ref) Resource() (schema.GroupVersionResource, error) {
	gv, err := schema.ParseGroupVersion(r.APIVersion)
	if err != nil {
		return schema.GroupVersionResource{}, fmt.Errorf("%s: %w", r, err)
	}
	name, ok := resources[r.Kind]
	if !ok {
		return schema.GroupVersionResource{}, fmt.Errorf("%s: no known resource for kind %s", r, r.Kind)
	}
	return gv.WithResource(name), nil
}

// RefOf names an object.
func RefOf(o map[string]any) Ref {
	meta, _ := o["metadata"].(object)
	return Ref{APIVersion: str(o["apiVersion"]), Kind: kind(o), Namespace: str(meta["namespace"]), Name: str(meta["name"])}
}
