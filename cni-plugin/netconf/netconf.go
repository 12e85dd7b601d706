// Package netconf is the plexus-cni entry of a conflist: its keys, defaults
// and validation (ARCHITECTURE.md §2), read by the plugin and by the node
// agent, which checks the installed entry.
package netconf

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/plexus-mesh/plexus/cni-plugin/xtables"
	"github.com/plexus-mesh/plexus/mesh/podcontract"
)

// Node agent pods are recognised by name, before any API call: they live in
// NodeAgentNamespace and their names start with NodeAgentPodPrefix (the
// DaemonSet "plexus-node" names its pods plexus-node-<suffix>). Other pods
// of that namespace (the control plane) are meshed like any other.
const (
	NodeAgentNamespace = "plexus-system"
	NodeAgentPodPrefix = "plexus-node-"
)

// NetConf is the plugin's entry in the conflist.
type NetConf struct {
	types.PluginConf

	Kubeconfig        string    `json:"kubeconfig"`
	ExcludeNamespaces *[]string `json:"exclude_namespaces,omitempty"`
	IptablesMode      string    `json:"iptables_mode,omitempty"`
	LogLevel          string    `json:"log_level,omitempty"`
	LogFile           string    `json:"log_file,omitempty"`
	Proxy             ProxyConf `json:"proxy"`
	// ReportSocket is the node agent's unix datagram socket (a host path)
	// that gets one report per ADD, DEL and CHECK; empty: no reports.
	ReportSocket string `json:"report_socket,omitempty"`
	// PodSocket is the node agent's unix stream socket that answers pod
	// lookups from its informer cache (AgentPodPath); empty, or a pod the
	// agent does not hold: the pod is read from the API server.
	PodSocket string `json:"pod_socket,omitempty"`

	// Cluster-wide skip lists, same syntax as the annotations; a pod's
	// annotations add to them.
	SkipInboundPorts    List `json:"skip_inbound_ports,omitempty"`
	SkipOutboundPorts   List `json:"skip_outbound_ports,omitempty"`
	SkipInboundSubnets  List `json:"skip_inbound_subnets,omitempty"`
	SkipOutboundSubnets List `json:"skip_outbound_subnets,omitempty"`

	// rawPrevResult is prevResult exactly as received, passed through by ADD.
	rawPrevResult json.RawMessage
}

// RawPrevResult is prevResult exactly as received, which ADD passes
// through unchanged.
func (c *NetConf) RawPrevResult() json.RawMessage { return c.rawPrevResult }

// ProxyConf overrides the proxy's ports and identity; zero means default.
type ProxyConf struct {
	InboundPort  uint16 `json:"inbound_port,omitempty"`
	OutboundPort uint16 `json:"outbound_port,omitempty"`
	AdminPort    uint16 `json:"admin_port,omitempty"`
	UID          uint32 `json:"uid,omitempty"`
	GID          uint32 `json:"gid,omitempty"`
}

// List is a comma-separated list given either as one JSON string
// ("25,443") or as a JSON array of strings and numbers ([25, "8000-8100"]).
type List string

// UnmarshalJSON accepts a string or an array.
func (l *List) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*l = List(s)
		return nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(b, &items); err != nil {
		return fmt.Errorf("want a string or an array, got %s", b)
	}
	parts := make([]string, 0, len(items))
	for _, it := range items {
		var str string
		if err := json.Unmarshal(it, &str); err == nil {
			parts = append(parts, str)
			continue
		}
		var n json.Number
		if err := json.Unmarshal(it, &n); err != nil {
			return fmt.Errorf("list item %s is neither a string nor a number", it)
		}
		parts = append(parts, n.String())
	}
	*l = List(strings.Join(parts, ","))
	return nil
}

// ParseConf decodes stdin data. It does not validate; see Validate.
func ParseConf(data []byte) (*NetConf, error) {
	conf := &NetConf{}
	if err := json.Unmarshal(data, conf); err != nil {
		return nil, fmt.Errorf("decoding plugin config: %w", err)
	}
	var raw struct {
		PrevResult json.RawMessage `json:"prevResult"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("decoding plugin config: %w", err)
	}
	if len(raw.PrevResult) > 0 && string(raw.PrevResult) != "null" {
		conf.rawPrevResult = raw.PrevResult
		if err := version.ParsePrevResult(&conf.PluginConf); err != nil {
			return nil, fmt.Errorf("decoding prevResult: %w", err)
		}
	}
	return conf, nil
}

// Validate checks everything but the kubeconfig file's contents.
func (c *NetConf) Validate() error {
	if c.Kubeconfig == "" {
		return errors.New(`"kubeconfig" is required`)
	}
	if err := xtables.Mode(c.IptablesMode).Validate(); err != nil {
		return err
	}
	if _, err := ParseLevel(c.LogLevel); err != nil {
		return err
	}
	if c.ReportSocket != "" && !filepath.IsAbs(c.ReportSocket) {
		return fmt.Errorf(`"report_socket" %q is not an absolute path`, c.ReportSocket)
	}
	if c.PodSocket != "" && !filepath.IsAbs(c.PodSocket) {
		return fmt.Errorf(`"pod_socket" %q is not an absolute path`, c.PodSocket)
	}
	for _, ns := range c.Excluded() {
		if ns == "" {
			return errors.New(`"exclude_namespaces" holds an empty name`)
		}
	}
	if _, err := c.PodBase(); err != nil {
		return err
	}
	return nil
}

// Excluded is the list of namespaces never meshed.
func (c *NetConf) Excluded() []string {
	if c.ExcludeNamespaces == nil {
		return []string{"kube-system"}
	}
	return *c.ExcludeNamespaces
}

// Mode is the iptables backend to use.
func (c *NetConf) Mode() xtables.Mode {
	if c.IptablesMode == "" {
		return xtables.Auto
	}
	return xtables.Mode(c.IptablesMode)
}

// PodBase is the pod configuration before annotations: defaults overridden
// by the "proxy" object and the cluster-wide skip lists.
func (c *NetConf) PodBase() (podcontract.Config, error) {
	b := podcontract.Defaults()
	set16 := func(dst *uint16, v uint16) {
		if v != 0 {
			*dst = v
		}
	}
	set32 := func(dst *uint32, v uint32) {
		if v != 0 {
			*dst = v
		}
	}
	set16(&b.InboundPort, c.Proxy.InboundPort)
	set16(&b.OutboundPort, c.Proxy.OutboundPort)
	set16(&b.AdminPort, c.Proxy.AdminPort)
	set32(&b.ProxyUID, c.Proxy.UID)
	set32(&b.ProxyGID, c.Proxy.GID)
	var err error
	if b.SkipInboundPorts, err = podcontract.ParsePorts(string(c.SkipInboundPorts)); err != nil {
		return b, fmt.Errorf(`"skip_inbound_ports": %w`, err)
	}
	if b.SkipOutboundPorts, err = podcontract.ParsePorts(string(c.SkipOutboundPorts)); err != nil {
		return b, fmt.Errorf(`"skip_outbound_ports": %w`, err)
	}
	if b.SkipInboundSubnets, err = podcontract.ParseSubnets(string(c.SkipInboundSubnets)); err != nil {
		return b, fmt.Errorf(`"skip_inbound_subnets": %w`, err)
	}
	if b.SkipOutboundSubnets, err = podcontract.ParseSubnets(string(c.SkipOutboundSubnets)); err != nil {
		return b, fmt.Errorf(`"skip_outbound_subnets": %w`, err)
	}
	if err := b.Validate(); err != nil {
		return b, fmt.Errorf(`"proxy": %w`, err)
	}
	return b, nil
}

func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(s) {
	case "", "info":
		return slog.LevelInfo, nil
	case "debug":
		return slog.LevelDebug, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf(`"log_level" %q: want debug, info, warn or error`, s)
}
