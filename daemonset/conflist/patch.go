// Package conflist finds the CNI network config the container runtime uses
// and adds or removes the plexus-cni entry in it, the way the runtime will
// read it back (validated with libcni before every write).
package conflist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"

	"github.com/containernetworking/cni/libcni"
)

// PluginType is the "type" of our entry in the plugin chain.
const PluginType = "plexus-cni"

// object is a JSON object whose members keep their order and their exact
// bytes, so fields we do not know survive a rewrite untouched.
type object struct {
	keys []string
	vals map[string]json.RawMessage
}

func parseObject(data []byte) (*object, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return nil, errors.New("not a JSON object")
	}
	o := &object{vals: map[string]json.RawMessage{}}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, err
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, fmt.Errorf("member %q: %w", key, err)
		}
		if _, dup := o.vals[key]; !dup {
			o.keys = append(o.keys, key)
		}
		o.vals[key] = v
	}
	if _, err := dec.Token(); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("trailing data after the JSON object")
	}
	return o, nil
}

func (o *object) set(key string, v json.RawMessage) {
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = v
}

// marshal renders the object indented by two spaces with a final newline.
func (o *object) marshal() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		enc := json.NewEncoder(&b)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(k) // a string always encodes; Encode adds a newline Indent drops
		b.WriteByte(':')
		b.Write(o.vals[k])
	}
	b.WriteByte('}')
	var out bytes.Buffer
	if err := json.Indent(&out, b.Bytes(), "", "  "); err != nil {
		return nil, err
	}
	out.WriteByte('\n')
	return out.Bytes(), nil
}

func pluginType(raw json.RawMessage) string {
	var t struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal(raw, &t)
	return t.Type
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	da, db := json.NewDecoder(bytes.NewReader(a)), json.NewDecoder(bytes.NewReader(b))
	da.UseNumber()
	db.UseNumber()
	if da.Decode(&x) != nil || db.Decode(&y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// PatchList returns a conflist with entry as the last plugin and every other
// plexus-cni entry removed. changed is false when data already ends with
// exactly entry and holds no other plexus-cni entry.
func PatchList(data, entry []byte) (out []byte, changed bool, err error) {
	o, plugins, err := parseList(data)
	if err != nil {
		return nil, false, err
	}
	kept := make([]json.RawMessage, 0, len(plugins)+1)
	ours := 0
	for _, p := range plugins {
		if pluginType(p) == PluginType {
			ours++
			continue
		}
		kept = append(kept, p)
	}
	if ours == 1 && pluginType(plugins[len(plugins)-1]) == PluginType &&
		jsonEqual(plugins[len(plugins)-1], entry) {
		return data, false, nil
	}
	if len(kept) == 0 {
		return nil, false, errors.New("the list holds only plexus-cni entries; no primary plugin to chain after")
	}
	kept = append(kept, json.RawMessage(entry))
	out, err = withPlugins(o, kept)
	return out, true, err
}

// ConvertConf turns a single-plugin .conf into a conflist holding that
// plugin, unchanged, followed by entry. The list takes the plugin's name
// and cniVersion, so the version is never lowered.
func ConvertConf(data, entry []byte) ([]byte, error) {
	plugin, err := parseObject(data)
	if err != nil {
		return nil, err
	}
	if _, ok := plugin.vals["plugins"]; ok {
		return nil, errors.New(`a .conf holds one plugin; this one has a "plugins" list`)
	}
	if pluginType(data) == PluginType {
		return nil, errors.New("the .conf is a plexus-cni entry alone; no primary plugin to chain after")
	}
	list := &object{vals: map[string]json.RawMessage{}}
	for _, k := range []string{"cniVersion", "name"} {
		if v, ok := plugin.vals[k]; ok {
			list.set(k, v)
		}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, data); err != nil {
		return nil, err
	}
	return withPlugins(list, []json.RawMessage{compact.Bytes(), json.RawMessage(entry)})
}

// UnpatchList removes every plexus-cni entry. changed is false when there
// was none.
func UnpatchList(data []byte) (out []byte, changed bool, err error) {
	o, plugins, err := parseList(data)
	if err != nil {
		return nil, false, err
	}
	kept := make([]json.RawMessage, 0, len(plugins))
	for _, p := range plugins {
		if pluginType(p) != PluginType {
			kept = append(kept, p)
		}
	}
	if len(kept) == len(plugins) {
		return data, false, nil
	}
	if len(kept) == 0 {
		return nil, false, errors.New("removing plexus-cni would leave no plugins")
	}
	out, err = withPlugins(o, kept)
	return out, true, err
}

// Contains reports whether a conflist's last plugin is plexus-cni.
func Contains(data []byte) bool {
	_, plugins, err := parseList(data)
	return err == nil && pluginType(plugins[len(plugins)-1]) == PluginType
}

func parseList(data []byte) (*object, []json.RawMessage, error) {
	o, err := parseObject(data)
	if err != nil {
		return nil, nil, err
	}
	var plugins []json.RawMessage
	if err := json.Unmarshal(o.vals["plugins"], &plugins); err != nil || len(plugins) == 0 {
		return nil, nil, errors.New(`no "plugins" list`)
	}
	return o, plugins, nil
}

func withPlugins(o *object, plugins []json.RawMessage) ([]byte, error) {
	// Built by hand: json.Marshal would HTML-escape strings inside the
	// plugins' raw bytes.
	pl := []byte{'['}
	for i, p := range plugins {
		if i > 0 {
			pl = append(pl, ',')
		}
		pl = append(pl, p...)
	}
	o.set("plugins", append(pl, ']'))
	out, err := o.marshal()
	if err != nil {
		return nil, err
	}
	if _, err := libcni.ConfListFromBytes(out); err != nil {
		return nil, fmt.Errorf("result fails libcni validation: %w", err)
	}
	return out, nil
}
