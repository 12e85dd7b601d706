package vizcli

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/plexus-mesh/plexus/viz/viznames"
)

// object is one Kubernetes object as generic maps, so that every field of
// deploy/plexus-viz passes through untouched.
type object = map[string]any

// Renderer renders the extension from Manifests (deploy.Manifests:
// plexus-viz/*.yaml).
//
// The tap service keeps its own serving certificate (Secret
// plexus-tap-tls) and writes its CA into the APIService's caBundle, as the
// injector does for its webhook (control/webhookcert): install renders
// neither, so applying the manifests again never replaces the certificate
// the running service holds.
type Renderer struct {
	Manifests fs.FS
}

// Install writes every object of the extension as multi-document YAML for
// kubectl apply -f -: the Namespace first and the APIService last, so that
// the API server routes to the tap service only once it is there.
func (r Renderer) Install(w io.Writer) error {
	objs, err := r.objects()
	if err != nil {
		return fmt.Errorf("viz install: %w", err)
	}
	sort.SliceStable(objs, func(i, j int) bool { return installRank(objs[i]) < installRank(objs[j]) })
	return write(w, objs)
}

func installRank(o object) int {
	switch kindOf(o) {
	case "Namespace":
		return 0
	case "APIService":
		return 2
	}
	return 1
}

// Uninstall writes what kubectl delete -f - must delete, in order: the
// APIService first (an aggregated API that no longer answers breaks
// discovery, and with it the deletion of every namespace), then the
// namespace with everything in it, then the objects outside it (cluster
// roles and bindings, the role bindings in kube-system and
// plexus-system), each as its apiVersion, kind and name alone.
func (r Renderer) Uninstall(w io.Writer) error {
	objs, err := r.objects()
	if err != nil {
		return fmt.Errorf("viz uninstall: %w", err)
	}
	var first, ns, rest []object
	for _, o := range objs {
		ref := refOf(o)
		switch {
		case kindOf(o) == "APIService":
			first = append(first, ref)
		case kindOf(o) == "Namespace":
			ns = append(ns, ref)
		case namespaceOf(o) != viznames.Namespace:
			rest = append(rest, ref)
		}
	}
	if len(ns) == 0 {
		return fmt.Errorf("viz uninstall: %s holds no Namespace", viznames.ManifestDir)
	}
	for i, j := 0, len(rest)-1; i < j; i, j = i+1, j-1 {
		rest[i], rest[j] = rest[j], rest[i]
	}
	return write(w, append(append(first, ns...), rest...))
}

// objects reads every document of ManifestDir/*.yaml, files in name order.
func (r Renderer) objects() ([]object, error) {
	files, err := fs.Glob(r.Manifests, viznames.ManifestDir+"/*.yaml")
	if err != nil {
		return nil, fmt.Errorf("listing %s: %w", viznames.ManifestDir, err)
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no manifests in %s", viznames.ManifestDir)
	}
	sort.Strings(files)
	var objs []object
	for _, f := range files {
		if path.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := fs.ReadFile(r.Manifests, f)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f, err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for i := 1; ; i++ {
			var o object
			err := dec.Decode(&o)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("%s document %d: %w", f, i, err)
			}
			if len(o) == 0 {
				continue // only comments
			}
			if kindOf(o) == "" || nameOf(o) == "" {
				return nil, fmt.Errorf("%s document %d has no kind or name", f, i)
			}
			objs = append(objs, o)
		}
	}
	return objs, nil
}

func write(w io.Writer, objs []object) error {
	var buf bytes.Buffer
	for i, o := range objs {
		b, err := yaml.Marshal(o)
		if err != nil {
			return fmt.Errorf("encoding %s %s: %w", kindOf(o), nameOf(o), err)
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
func refOf(o object) object {
	meta := object{"name": nameOf(o)}
	if ns := namespaceOf(o); ns != "" {
		meta["namespace"] = ns
	}
	return object{"apiVersion": o["apiVersion"], "kind": o["kind"], "metadata": meta}
}

func kindOf(o object) string {
	s, _ := o["kind"].(string)
	return s
}

func metaString(o object, key string) string {
	meta, _ := o["metadata"].(object)
	s, _ := meta[key].(string)
	return s
}

func nameOf(o object) string      { return metaString(o, "name") }
func namespaceOf(o object) string { return metaString(o, "namespace") }
