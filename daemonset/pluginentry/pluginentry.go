// Package pluginentry builds the plexus-cni entry the agent appends to the
// primary conflist, from the plugin config an admin provides (the
// ConfigMap), checked with the plugin's own parser.
package pluginentry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/plexus-mesh/plexus/cni-plugin/netconf"
)

// Sockets are the node agent's sockets the plugin talks to; empty: none.
type Sockets struct {
	Report string // "report_socket": the plugin's ADD/DEL/CHECK reports
	Pods   string // "pod_socket": pod lookups from the agent's cache
}

// Build returns the entry: the keys of config (a JSON object, may be empty)
// with "type" set to plexus-cni, "kubeconfig" set to kubeconfig and, for
// each socket that is not empty, its key set to it. The result is compact
// JSON the plugin itself accepts.
func Build(config []byte, kubeconfig string, sockets Sockets) ([]byte, error) {
	m := map[string]json.RawMessage{}
	if len(bytes.TrimSpace(config)) > 0 {
		dec := json.NewDecoder(bytes.NewReader(config))
		dec.UseNumber()
		if err := dec.Decode(&m); err != nil {
			return nil, fmt.Errorf("plugin config: %w", err)
		}
	}
	for _, k := range []string{"name", "cniVersion", "plugins", "prevResult"} {
		if _, ok := m[k]; ok {
			return nil, fmt.Errorf("plugin config: %q is set by the runtime, not here", k)
		}
	}
	if t, ok := m["type"]; ok && string(t) != `"plexus-cni"` {
		return nil, fmt.Errorf("plugin config: \"type\" is %s, want \"plexus-cni\" or unset", t)
	}
	if kubeconfig == "" {
		return nil, errors.New("plugin config: no kubeconfig path")
	}
	m["type"] = json.RawMessage(`"plexus-cni"`)
	kc, _ := json.Marshal(kubeconfig)
	m["kubeconfig"] = kc
	for key, path := range map[string]string{"report_socket": sockets.Report, "pod_socket": sockets.Pods} {
		if path != "" {
			m[key], _ = json.Marshal(path)
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	conf, err := netconf.ParseConf(out)
	if err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	if err := conf.Validate(); err != nil {
		return nil, fmt.Errorf("plugin config: %w", err)
	}
	return out, nil
}
