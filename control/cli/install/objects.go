package install

import (
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"sort"

	"sigs.k8s.io/yaml"
)

// markManaged labels o as rendered by the tool by.
func markManaged(o object, by string) {
	meta, _ := o["metadata"].(object)
	if meta == nil {
		meta = object{}
		o["metadata"] = meta
	}
	labels, _ := meta["labels"].(object)
	if labels == nil {
		labels = object{}
		meta["labels"] = labels
	}
	labels[ManagedBy] = by
}

// isGatewayAPICRD: one of the Gateway API's CRDs, rendered verbatim.
func isGatewayAPICRD(o object) bool {
	spec, _ := o["spec"].(object)
	return kind(o) == "CustomResourceDefinition" && spec["group"] == "gateway.networking.k8s.io"
}

// applyOrder ranks kinds so that what an object refers to exists first.
var applyOrder = []string{
	"Namespace", "CustomResourceDefinition", "Secret", "ConfigMap",
	"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
	"Service", "Deployment", "PodDisruptionBudget", "DaemonSet",
	// kinds not listed go here, before the webhooks
	"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration",
}

func rank(o object) int {
	k := kind(o)
	for i, name := range applyOrder {
		if name == k {
			return 2 * i
		}
	}
	return 2*12 + 1 // just before the webhooks
}

// load reads every *.yaml in dir but kustomization.yaml, in name order,
// and returns its non-empty documents.
func load(fsys fs.FS, dir string) ([]object, error) {
	files, err := fs.Glob(fsys, dir+"/*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no manifests in %s", dir)
	}
	sort.Strings(files)
	var objs []object
	for _, f := range files {
		if path.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		for i, doc := range splitDocuments(b) {
			var o object
			if err := yaml.Unmarshal(doc, &o); err != nil {
				return nil, fmt.Errorf("%s document %d: %w", f, i+1, err)
			}
			if len(o) == 0 {
				continue // only comments
			}
			if kind(o) == "" {
				return nil, fmt.Errorf("%s document %d has no kind", f, i+1)
			}
			objs = append(objs, o)
		}
	}
	return objs, nil
}

// splitDocuments splits a YAML stream at its "---" separator lines.
func splitDocuments(b []byte) [][]byte {
	var docs [][]byte
	var cur []byte
	for _, line := range bytes.SplitAfter(b, []byte("\n")) {
		if t := bytes.TrimRight(line, " \t\r\n"); string(t) == "---" || bytes.HasPrefix(t, []byte("--- ")) {
			docs = append(docs, cur)
			cur = nil
			continue
		}
		cur = append(cur, line...)
	}
	return append(docs, cur)
}

func namespace(cfg Config) object {
	// The node agent needs hostPath and hostNetwork ("privileged" Pod
	// Security); the control plane alone meets "restricted".
	level := "privileged"
	if cfg.NodeImageMode {
		level = "restricted"
	}
	return object{
		"apiVersion": "v1",
		"kind":       "Namespace",
		"metadata": object{
			"name": Namespace,
			"labels": object{
				"app.kubernetes.io/part-of":          "plexus",
				"pod-security.kubernetes.io/enforce": level,
			},
		},
	}
}

func kind(o object) string {
	k, _ := o["kind"].(string)
	return k
}

// describe names an object for errors: Kind namespace/name.
func describe(o object) string {
	meta, _ := o["metadata"].(object)
	name, _ := meta["name"].(string)
	if ns, _ := meta["namespace"].(string); ns != "" {
		name = ns + "/" + name
	}
	return kind(o) + " " + name
}
