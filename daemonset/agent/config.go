// Package agent is the node agent: it installs the CNI plugin, keeps it
// last in the primary CNI config and reports readiness and metrics (Run),
// lays it down into a node image root (InstallImage), and removes it
// (Uninstall).
package agent

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/plexus-mesh/plexus/daemonset/repair"
)

// Defaults for the node's layout.
const (
	DefaultCNIBinDir  = "/opt/cni/bin"
	DefaultCNIConfDir = "/etc/cni/net.d"
	DefaultStateDir   = "/var/lib/plexus"
	// DefaultNetnsDir is where containerd and CRI-O bind-mount pods'
	// network namespaces (/var/run is a link to /run).
	DefaultNetnsDir = "/run/netns"
)

// Paths are the node's dirs as the plugin and the runtime see them on the
// host. Root is where the host's / is for the agent: "/host" when the
// DaemonSet mounts host dirs under /host, an image root in node-image
// mode, "/" or empty when it runs on the host itself.
type Paths struct {
	Root       string
	CNIBinDir  string
	CNIConfDir string
	StateDir   string // credentials and the conflist record, root-only
}

// Validate fills defaults and checks the dirs are absolute and distinct
// enough: credentials must never live in the conf dir.
func (p *Paths) Validate() error {
	if p.Root == "" {
		p.Root = "/"
	}
	if p.CNIBinDir == "" {
		p.CNIBinDir = DefaultCNIBinDir
	}
	if p.CNIConfDir == "" {
		p.CNIConfDir = DefaultCNIConfDir
	}
	if p.StateDir == "" {
		p.StateDir = DefaultStateDir
	}
	for name, d := range map[string]string{"root": p.Root, "CNI bin dir": p.CNIBinDir, "CNI conf dir": p.CNIConfDir, "state dir": p.StateDir} {
		if !filepath.IsAbs(d) {
			return fmt.Errorf("%s %q is not an absolute path", name, d)
		}
	}
	if rel, err := filepath.Rel(p.CNIConfDir, p.StateDir); err == nil && rel != ".." && !strings.HasPrefix(rel, "../") {
		return fmt.Errorf("state dir %s is inside the CNI conf dir %s; credentials must live outside it", p.StateDir, p.CNIConfDir)
	}
	return nil
}

// ReportSocketFile is the name, in the state dir, of the unix datagram
// socket on which the agent receives the plugin's reports.
const ReportSocketFile = "reports.sock"

// ReportSocket is the report socket's host path.
func (p *Paths) ReportSocket() string { return filepath.Join(p.StateDir, ReportSocketFile) }

// PodSocketFile is the name, in the state dir, of the unix stream socket
// on which the agent answers the plugin's pod lookups (podlookup).
const PodSocketFile = "pods.sock"

// PodSocket is the pod lookup socket's host path.
func (p *Paths) PodSocket() string { return filepath.Join(p.StateDir, PodSocketFile) }

// At is path (a host path) as the agent reaches it, under Root.
func (p *Paths) At(path string) string { return filepath.Join(p.Root, path) }

// RunConfig configures the DaemonSet mode.
type RunConfig struct {
	Paths
	PluginBinary string // the plugin binary shipped in the agent's image
	PluginConfig string // JSON file with the plugin's keys (the ConfigMap); may be empty

	// Kubeconfig, when set, is a host path the plugin uses as is (the
	// kubelet's); no credentials are written. Otherwise the agent writes a
	// kubeconfig for its own service account from the fields below.
	Kubeconfig  string
	APIServer   string // URL reachable from the host network
	CAFile      string
	TokenSource string
	TokenSync   time.Duration // how often to copy a rotated token (default 1m)

	Listen string // address of /ready and /metrics
	// Resync is how often the config and the binary are checked even
	// without a change event (default 30s), in case events were lost.
	Resync time.Duration

	// Repair configures the repair of meshed pods' rules, which runs when
	// Deps.Pods is set (it needs the node name).
	Repair repair.Config
	// NetnsDir is the host dir where the runtime bind-mounts pods'
	// network namespaces (default /run/netns), reached under Root.
	NetnsDir string
}

// Validate checks the config and fills defaults.
func (c *RunConfig) Validate() error {
	if err := c.Paths.Validate(); err != nil {
		return err
	}
	if c.PluginBinary == "" {
		return errors.New("plugin binary path is empty")
	}
	if c.Listen == "" {
		return errors.New("listen address is empty")
	}
	if c.TokenSync <= 0 {
		c.TokenSync = time.Minute
	}
	if c.NetnsDir == "" {
		c.NetnsDir = DefaultNetnsDir
	}
	if !filepath.IsAbs(c.NetnsDir) {
		return fmt.Errorf("netns dir %q is not an absolute path", c.NetnsDir)
	}
	if c.Repair.Mode != "" {
		if err := c.Repair.Mode.Validate(); err != nil {
			return err
		}
	}
	if c.Kubeconfig != "" {
		if !filepath.IsAbs(c.Kubeconfig) {
			return fmt.Errorf("kubeconfig %q is not an absolute host path", c.Kubeconfig)
		}
		return nil
	}
	switch {
	case c.APIServer == "":
		return errors.New("API server URL is empty (in a pod it comes from KUBERNETES_SERVICE_HOST and _PORT)")
	case c.CAFile == "":
		return errors.New("CA file is empty")
	case c.TokenSource == "":
		return errors.New("service account token file is empty")
	}
	return nil
}

// ImageConfig configures node-image mode: no API calls, the plugin uses a
// kubeconfig already on the node (the kubelet's).
type ImageConfig struct {
	Paths
	PluginBinary string
	PluginConfig string
	Kubeconfig   string // host path, e.g. /var/lib/kubelet/kubeconfig
	// AllowNoConfig installs the binary even when the image has no primary
	// CNI config yet (something else must then patch it at boot).
	AllowNoConfig bool
}

// Validate checks the config and fills defaults.
func (c *ImageConfig) Validate() error {
	if err := c.Paths.Validate(); err != nil {
		return err
	}
	if c.PluginBinary == "" {
		return errors.New("plugin binary path is empty")
	}
	if c.Kubeconfig == "" || !filepath.IsAbs(c.Kubeconfig) {
		return fmt.Errorf("kubeconfig %q must be an absolute host path", c.Kubeconfig)
	}
	return nil
}
