package inject

import (
	"sort"
	"strings"
)

// Op is one RFC 6902 JSON patch operation.
type Op struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// patch builds a list of "add" operations that work whether or not the
// parent field exists.
type patch struct{ ops []Op }

// prepend puts v first in the array at path, which has n elements.
func (p *patch) prepend(path string, n int, v any) {
	if n == 0 {
		p.ops = append(p.ops, Op{Op: "add", Path: path, Value: []any{v}})
		return
	}
	p.ops = append(p.ops, Op{Op: "add", Path: path + "/0", Value: v})
}

// appendTo adds v after the n elements of the array at path.
func (p *patch) appendTo(path string, n int, v any) {
	if n == 0 {
		p.ops = append(p.ops, Op{Op: "add", Path: path, Value: []any{v}})
		return
	}
	p.ops = append(p.ops, Op{Op: "add", Path: path + "/-", Value: v})
}

// setKeys sets keys of the map at path, creating it when missing. Keys
// are written in sorted order so the patch is deterministic.
func (p *patch) setKeys(path string, missing bool, kv map[string]string) {
	if missing {
		p.ops = append(p.ops, Op{Op: "add", Path: path, Value: kv})
		return
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		p.ops = append(p.ops, Op{Op: "add", Path: path + "/" + escape(k), Value: kv[k]})
	}
}

// escape encodes a map key as a JSON pointer token.
func escape(k string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(k)
}
