// Package extension renders an extension's manifests (a folder of
// deploy.Manifests, as viz's and multicluster's) for kubectl: install in
// the order the API server needs, uninstall as references in the order
// deletion needs.
package extension

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strings"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Object is one Kubernetes object as generic maps, so that every field of
// the manifests passes through untouched.
type Object = map[string]any

// Manifests is one extension's folder of manifests.
type Manifests struct {
	// FS holds Dir/*.yaml (deploy.Manifests).
	FS fs.FS
	// Dir is the extension's folder; Namespace the namespace it runs in.
	Dir, Namespace string
	// Args sets flags of the containers of its Deployments: every
	// --NAME=VALUE argument whose --NAME is a key takes the key's value
	// (the mesh's trust domain, say).
	Args map[string]string
}

// Install writes every object as multi-document YAML for kubectl apply
// -f -: Namespaces and CRDs first, APIServices last (the API server
// routes to an aggregated API only once its service is there).
func (m Manifests) Install(w io.Writer) error {
	objs, err := m.Objects()
	if err != nil {
		return fmt.Errorf("%s install: %w", m.Dir, err)
	}
	sort.SliceStable(objs, func(i, j int) bool { return installRank(objs[i]) < installRank(objs[j]) })
	return Write(w, objs)
}

func installRank(o Object) int {
	switch KindOf(o) {
	case "Namespace":
		return 0
	case "CustomResourceDefinition":
		return 1
	case "APIService":
		return 3
	}
	return 2
}

// Uninstall writes what kubectl delete -f - must delete, in order:
// APIServices first (an aggregated API that no longer answers breaks
// discovery, and with it the deletion of every namespace), then the
// namespace with everything in it, then the objects outside it (cluster
// roles and bindings, CRDs, role bindings elsewhere) in reverse, each as
// its apiVersion, kind and name alone.
func (m Manifests) Uninstall(w io.Writer) error {
	objs, err := m.Objects()
	if err != nil {
		return fmt.Errorf("%s uninstall: %w", m.Dir, err)
	}
	var first, ns, rest []Object
	for _, o := range objs {
		ref := refOf(o)
		switch {
		case KindOf(o) == "APIService":
			first = append(first, ref)
		case KindOf(o) == "Namespace":
			ns = append(ns, ref)
		case namespaceOf(o) != m.Namespace:
			rest = append(rest, ref)
		}
	}
	if len(ns) == 0 {
		return fmt.Errorf("%s uninstall: %s holds no Namespace", m.Dir, m.Dir)
	}
	for i, j := 0, len(rest)-1; i < j; i, j = i+1, j-1 {
		rest[i], rest[j] = rest[j], rest[i]
	}
	return Write(w, append(append(first, ns...), rest...))
}

// Objects reads every document of Dir/*.yaml, files in name order.
func (m Manifests) Objects() ([]Object, error) {
	files, err := fs.Glob(m.FS, m.Dir+"/*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", m.Dir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no manifests in %s", m.Dir)
	}
	sort.Strings(files)
	var objs []Object
	for _, f := range files {
		if path.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := fs.ReadFile(m.FS, f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		docs, err := Decode(f, b)
		if err != nil {
			return nil, err
		}
		for _, o := range docs {
			m.setArgs(o)
		}
		objs = append(objs, docs...)
	}
	return objs, nil
}

// setArgs applies Args to o's containers, when o is a Deployment.
func (m Manifests) setArgs(o Object) {
	if len(m.Args) == 0 || KindOf(o) != "Deployment" {
		return
	}
	spec, _ := o["spec"].(Object)
	template, _ := spec["template"].(Object)
	podSpec, _ := template["spec"].(Object)
	containers, _ := podSpec["containers"].([]any)
	for _, c := range containers {
		c, _ := c.(Object)
		args, _ := c["args"].([]any)
		for i, a := range args {
			s, _ := a.(string)
			if name, _, ok := strings.Cut(s, "="); ok {
				if v, set := m.Args[name]; set {
					args[i] = name + "=" + v
				}
			}
		}
	}
}

// Decode decodes the multi-document YAML b (named name in errors): every
// document that is not only comments, each with a kind and a name.
func Decode(name string, b []byte) ([]Object, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var objs []Object
	for i := 1; ; i++ {
		var o Object
		err := dec.Decode(&o)
		if errors.Is(err, io.EOF) {
			return objs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s document %d: %w", name, i, err)
		}
		if len(o) == 0 {
			continue // only comments
		}
		if KindOf(o) == "" || nameOf(o) == "" {
			return nil, fmt.Errorf("%s document %d has no kind or name", name, i)
		}
		objs = append(objs, o)
	}
}

// Write writes objs as multi-document YAML.
func Write(w io.Writer, objs []Object) error {
	var buf bytes.Buffer
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return fmt.Errorf("encoding %s %s: %w", KindOf(o), nameOf(o), err)
		}
		if i > 0 {
			buf.WriteString("---\n")
		}
		buf.Write(b)
	}
	_, err := w.Write(buf.Bytes())
	return err
}

// refOf is o reduced to what names it.
func refOf(o Object) Object {
	meta := Object{"name": nameOf(o)}
	if ns := namespaceOf(o); ns != "" {
		meta["namespace"] = ns
	}
	return Object{"apiVersion": o["apiVersion"], "kind": o["kind"], "metadata": meta}
}

// KindOf is o's kind.
func KindOf(o Object) string {
	s, _ := o["kind"].(string)
	return s
}

func metaString(o Object, key string) string {
	meta, _ := o["metadata"].(Object)
	s, _ := meta[key].(string)
	return s
}

func nameOf(o Object) string      { return metaString(o, "name") }
func namespaceOf(o Object) string { return metaString(o, "namespace") }
