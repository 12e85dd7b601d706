// Package optin adds or removes the plexus.dev/inject opt-in on Kubernetes
// manifests (the pod templates of workloads, pods and namespaces), keeping
// every other field, the key order and the comments of the input.
package optin

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/plexus-mesh/plexus/control/inject"
)

// Key is the annotation and label the injector reads (ARCHITECTURE.md §2).
const Key = inject.AnnotationInject

// Enabled is the value that opts in.
const Enabled = "enabled"

// Mode says whether to add or remove the opt-in.
type Mode int

const (
	// Inject sets plexus.dev/inject=enabled: as annotation and label on
	// pod templates and pods (the injector reads the annotation; the
	// webhook selects pods outside opted-in namespaces by the label), and
	// as label on namespaces (the webhook selects namespaces by label).
	Inject Mode = iota
	// Uninject removes plexus.dev/inject from the same places.
	Uninject
)

// Rewrite reads a stream of YAML (or JSON) documents from in and writes
// them to out in order, with the opt-in added or removed. Kinds that
// carry no pod template and are not namespaces pass through unchanged;
// a List's items are rewritten one by one. Nothing is written when any
// document is malformed; the error names the document by number.
func Rewrite(in io.Reader, out io.Writer, mode Mode) error {
	dec := yaml.NewDecoder(in)
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	for n := 1; ; n++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("document %d is not valid YAML: %w", n, err)
		}
		if len(doc.Content) == 0 || isNull(doc.Content[0]) {
			continue // an empty document
		}
		if doc.Content[0].Style&yaml.FlowStyle != 0 {
			block(doc.Content[0]) // JSON in, YAML out
		}
		if err := rewriteObject(doc.Content[0], mode); err != nil {
			return fmt.Errorf("document %d: %w", n, err)
		}
		if err := enc.Encode(&doc); err != nil {
			return fmt.Errorf("document %d: encoding: %w", n, err)
		}
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("encoding: %w", err)
	}
	if _, err := out.Write(buf.Bytes()); err != nil {
		return fmt.Errorf("writing: %w", err)
	}
	return nil
}

// podTemplatePaths maps kinds to where their pod template's metadata is.
var podTemplatePaths = map[string][]string{
	"Pod":                   {"metadata"},
	"Deployment":            {"spec", "template", "metadata"},
	"StatefulSet":           {"spec", "template", "metadata"},
	"DaemonSet":             {"spec", "template", "metadata"},
	"ReplicaSet":            {"spec", "template", "metadata"},
	"ReplicationController": {"spec", "template", "metadata"},
	"Job":                   {"spec", "template", "metadata"},
	"CronJob":               {"spec", "jobTemplate", "spec", "template", "metadata"},
}

func rewriteObject(obj *yaml.Node, mode Mode) error {
	if obj.Kind != yaml.MappingNode {
		return errors.New("not a Kubernetes object (want a mapping with apiVersion and kind)")
	}
	kindNode := get(obj, "kind")
	if kindNode == nil || kindNode.Kind != yaml.ScalarNode || kindNode.Value == "" {
		return errors.New("not a Kubernetes object: no kind")
	}
	kind := kindNode.Value
	if items := get(obj, "items"); items != nil && strings.HasSuffix(kind, "List") {
		if items.Kind != yaml.SequenceNode {
			return fmt.Errorf("%s: items is not a list", kind)
		}
		for i, it := range items.Content {
			if err := rewriteObject(it, mode); err != nil {
				return fmt.Errorf("%s item %d: %w", kind, i+1, err)
			}
		}
		return nil
	}
	if kind == "Namespace" {
		meta, err := ensureMapping(obj, "metadata")
		if err != nil {
			return fmt.Errorf("Namespace: %w", err)
		}
		if mode == Inject {
			return set(meta, "labels", Key, Enabled)
		}
		return unset(meta, []string{"labels", "annotations"}, Key)
	}
	path, ok := podTemplatePaths[kind]
	if !ok {
		return nil
	}
	meta := obj
	for _, k := range path {
		var err error
		if meta, err = ensureMapping(meta, k); err != nil {
			return fmt.Errorf("%s: %s: %w", kind, strings.Join(path, "."), err)
		}
	}
	if mode == Inject {
		if err := set(meta, "annotations", Key, Enabled); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		if err := set(meta, "labels", Key, Enabled); err != nil {
			return fmt.Errorf("%s: %w", kind, err)
		}
		return nil
	}
	if err := unset(meta, []string{"annotations", "labels"}, Key); err != nil {
		return fmt.Errorf("%s: %w", kind, err)
	}
	return nil
}

// set sets meta[field][key] = value, creating the field's mapping.
func set(meta *yaml.Node, field, key, value string) error {
	m, err := ensureMapping(meta, field)
	if err != nil {
		return err
	}
	if v := get(m, key); v != nil {
		*v = yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value, LineComment: v.LineComment}
		return nil
	}
	m.Content = append(m.Content, str(key), str(value))
	return nil
}

// unset deletes key from each of meta's fields, and a field it leaves
// empty.
func unset(meta *yaml.Node, fields []string, key string) error {
	for _, f := range fields {
		m := get(meta, f)
		if m == nil || isNull(m) {
			continue
		}
		if m.Kind != yaml.MappingNode {
			return fmt.Errorf("%s is not a mapping", f)
		}
		if del(m, key) && len(m.Content) == 0 {
			del(meta, f)
		}
	}
	return nil
}

// get returns the value of key in mapping m, or nil.
func get(m *yaml.Node, key string) *yaml.Node {
	if m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

// del removes key from mapping m and says whether it was there.
func del(m *yaml.Node, key string) bool {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			m.Content = append(m.Content[:i], m.Content[i+2:]...)
			return true
		}
	}
	return false
}

// ensureMapping returns m[key], creating an empty mapping when it is
// missing or null.
func ensureMapping(m *yaml.Node, key string) (*yaml.Node, error) {
	v := get(m, key)
	if v == nil {
		v = &yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
		at := len(m.Content)
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == "spec" {
				at = i // metadata before spec, as Kubernetes writes it
				break
			}
		}
		m.Content = append(m.Content[:at], append([]*yaml.Node{str(key), v}, m.Content[at:]...)...)
		return v, nil
	}
	if isNull(v) {
		*v = yaml.Node{Kind: yaml.MappingNode, Tag: "!!map"}
	}
	if v.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s is not a mapping", key)
	}
	if v.Style&yaml.FlowStyle != 0 && len(v.Content) == 0 {
		v.Style &^= yaml.FlowStyle // write `annotations: {}` as a block once it has a key
	}
	return v, nil
}

// block writes n and everything under it in block style.
func block(n *yaml.Node) {
	n.Style &^= yaml.FlowStyle
	if n.Kind == yaml.ScalarNode && n.Tag == "!!str" {
		n.Style = 0 // the encoder quotes where plain text would read as another type
	}
	for _, c := range n.Content {
		block(c)
	}
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.Tag == "!!null"
}

func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}
